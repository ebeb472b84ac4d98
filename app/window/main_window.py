"""The main window: builds the widgets, makes the controllers, connects the signals.

The window's parts are controllers it holds, each given what it needs in its
constructor: ``loading`` (model_loading.py: load, status bar, rollback, retries),
``navigation`` (search hits, versions, pins, export/import), ``keyboard`` (keys,
zoom, Help), ``view_menu`` (theme), ``welcome_hint`` and ``performance`` (the
Performance menu), ``agents`` (the Agents menu: coding agents in a terminal) and ``replies``
(sending, and showing replies as they stream).
The window itself keeps the settings, the conversation on screen and the
conversation list; names its callers use for a controller's parts stay as Via
attributes (via.py). Rules the parts keep together:
- The window appears before any model is loaded; loading runs on the engine thread.
- Nothing the user typed is lost: drafts are saved per conversation, a send
  that fails before any reply text puts the message back in the input box,
  and a reply cut short keeps its text (marked incomplete).
- A stream belongs to its conversation: its deltas are shown only while that
  conversation is on screen, and the worker saves them to that conversation
  whatever is on screen.
- A model load that fails rolls back to the last model set-up that worked, and says so.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QMainWindow, QSplitter, QVBoxLayout, QWidget

from engine.loading.gpu_guard import GpuGuard
from engine.voice import voice_installed

from app.core.paths import data_dir
from app.library import library_dock
from app.ui import theme
from app.window.keyboard import KeyboardController
from app.window.agents_menu import AgentsMenu
from app.window.menus import build_file_and_chat_menus
from app.window.view_menu import ViewMenu
from app.window.performance_menu import PerformanceMenu
from app.window.via import Via
from app.window.welcome_hint import UpgradeHint
from app.chat.chat_view import ChatView
from app.chat.conversation_list import ConversationList
from app.ui.info_bar import InfoArea
from app.ui.part_label import PartLabel
from app.ui.loop_monitor import LoopMonitor
from app.window.model_loading import LoadingController
from app.window.navigation import NavigationController
from app.window.replies import RepliesController
from app.core.model_defaults import load_changed
from app.core.settings import Settings, SettingsFile
from app.core.store import Store
from app.bridge.engine_host import EngineHost
from app.bridge.load_worker import Opener, open_model
from app.bridge.server_host import ServerHost


# Modules the engine thread would otherwise import while the window is up.
PRELOAD = ("engine.engine", "engine.backends.llama.backend", "engine.models.hub", "psutil")
SWITCH_INTERVAL_S = 0.001


class MainWindow(QMainWindow):
    """Hearth's window: the conversation list, the chat and the status bar, wired to the store,
    the engine thread and the controllers that own each part (see the module's docstring)."""

    def __init__(self, *, settings_file: SettingsFile | None = None, store: Store | None = None,
                 opener: Opener = open_model) -> None:  # opener: a load request -> an engine (EngineHost)
        # Import what loading the default model needs before the window exists.
        # Loading the native library holds the GIL for tens of milliseconds, and
        # once PySide6 is imported every further import is slower still
        # (shiboken's import hook reads each new module's source): on the engine
        # thread that froze the visible window past the 100 ms budget. It costs
        # ~0.1 s before the window appears; it loads no model and never imports
        # torch.
        for name in PRELOAD:
            importlib.import_module(name)
        importlib.import_module("engine.backends.llama").init()  # llama.cpp's start-up, with its log captured
        # A busy Python thread (the engine parsing a vocabulary, importing)
        # hands the GIL over only every switch interval, and the window thread
        # needs it for every event it handles; 5 ms (the default) let a burst
        # of work on the engine thread starve the window for 100+ ms.
        sys.setswitchinterval(SWITCH_INTERVAL_S)

        super().__init__()
        self.setWindowTitle("Hearth")
        self.setWindowIcon(theme.app_icon())
        self.resize(1100, 760)
        self.settings_file = settings_file or SettingsFile()
        self.settings, settings_notice = self.settings_file.load()
        self.store = store or Store()
        self.store.purge_deleted()
        self.scheme = theme.apply(QApplication.instance(), self.settings.theme)
        self.host = EngineHost(self, opener=opener)
        self.server_host = ServerHost(self.host, self)  # the local API server, off unless Settings say so
        self.monitor = LoopMonitor(self)
        self.current: int | None = None
        self._closed = False

        self._build_ui()
        self.welcome_hint = UpgradeHint(panel=self.chat.empty, owner=self)
        self._connect()
        self.models_dock = library_dock.attach(self)  # the model library and the Hub browser
        # keys from app/ui/shortcuts.py's table, then the menus that show them
        self.keyboard = KeyboardController(
            window=self, chat=self.chat, conversations=self.conversations, status_bar=self.statusBar(),
            current=lambda: self.current, select_conversation=self.select_conversation,
            delete_conversation=self.delete_conversation, streaming=lambda: self.replies.stream is not None,
            stop=self.stop, focus_search=self.navigation.focus_search,
            copy_last_reply=self.navigation.copy_last_reply)
        self.view_menu = ViewMenu(
            window=self, zoom_actions=[self.keyboard.key_actions[k] for k in ("zoom_in", "zoom_out", "zoom_reset")],
            settings=lambda: self.settings, adopt_settings=self._adopt_settings, apply_theme=self.apply_theme)
        self.performance = PerformanceMenu(
            window=self, store=self.store, host=self.host, info=self.info, current=lambda: self.current,
            settings=lambda: self.settings, apply_settings=self.apply_settings, server=self.server_host)
        self.agents = AgentsMenu(self)  # Claude Code, Codex CLI, OpenCode in a terminal, on this model
        self.voice = None  # dictation and read-aloud (app/voice), where the optional install put them
        if voice_installed():
            from app.voice.voice_controller import VoiceController

            self.voice = VoiceController(chat=self.chat, host=self.host, info=self.info,
                                         settings=lambda: self.settings, parent=self)
            self.server_host.voice_kit = lambda: self.voice.kit  # the API speaks with the window's models
        self.keyboard.build_help_menu()
        for notice in (settings_notice, self.store.notice):
            if notice:
                self.info.show_message(notice, "error")
        self._refresh_list(select=None)
        if self.current is None:
            self.new_conversation()
        self._apply_server()

    # The window's public surface that its controllers own (see Via).
    load_model = Via("loading")
    start = Via("loading")
    show_memory_details = Via("loading")
    memory_details = Via("loading")
    model_label = Via("loading")
    memory_label = Via("loading")
    load_bar = Via("loading")
    cancel_load_button = Via("loading")
    export_conversation = Via("navigation")
    import_conversation = Via("navigation")
    key_actions = Via("keyboard")
    zoom = Via("keyboard")
    show_shortcuts = Via("keyboard")
    shortcuts_sheet = Via("keyboard")
    theme_actions = Via("view_menu")
    set_theme = Via("view_menu")
    hint_answered = Via("welcome_hint", "answered")
    performance_panel = Via("performance")
    tune_dialog = Via("performance")
    act_performance = Via("performance")
    act_benchmark = Via("performance")
    stream = Via("replies")
    last_stats = Via("replies")
    context_label = Via("replies")
    send = Via("replies")
    stop = Via("replies")
    regenerate = Via("replies")
    edit_and_resend = Via("replies")

    # -- construction -------------------------------------------------------

    def _build_ui(self) -> None:
        central = QWidget()
        outer = QVBoxLayout(central)
        outer.setContentsMargins(0, 0, 0, 0)
        self.info = InfoArea()
        outer.addWidget(self.info)
        split = QSplitter(Qt.Orientation.Horizontal)
        self.conversations = ConversationList()
        self.chat = ChatView(theme.BUBBLES[self.scheme])
        self.chat.system.set_presets(self.settings.presets)
        split.addWidget(self.conversations)
        split.addWidget(self.chat)
        split.setStretchFactor(1, 1)
        split.setSizes([260, 840])
        outer.addWidget(split, 1)
        self.setCentralWidget(central)

        sb = self.statusBar()
        self.stats_label = PartLabel()
        self.stats_label.setToolTip("Live while a reply streams; then the last reply's numbers")
        self.loading = LoadingController(
            host=self.host, monitor=self.monitor, info=self.info, status_bar=sb, parent=self,
            settings_file=self.settings_file, settings=lambda: self.settings, adopt_settings=self._adopt_settings,
            open_settings=self.open_settings, closed=lambda: self._closed)
        self.replies = RepliesController(
            store=self.store, host=self.host, chat=self.chat, info=self.info, monitor=self.monitor,
            stats_label=self.stats_label, settings=lambda: self.settings, current=lambda: self.current,
            open_settings=self.open_settings, refresh_list=self._refresh_list,
            show_branches=lambda: self.navigation.show_branches(), closed=lambda: self._closed,
            adopt_settings=self._adopt_settings)
        sb.addPermanentWidget(self.stats_label)
        sb.addPermanentWidget(self.replies.context_label)
        sb.addPermanentWidget(self.model_label)
        sb.addPermanentWidget(self.memory_label)
        sb.addPermanentWidget(self.server_host.label)
        self.navigation = NavigationController(
            store=self.store, chat=self.chat, conversations=self.conversations, info=self.info, status_bar=sb,
            parent=self, current=lambda: self.current, streaming_in=self.replies.streaming_in,
            open_conversation=self.open_conversation, show_current=self._show_current,
            refresh_list=self._refresh_list)

        build_file_and_chat_menus(self)

    def _connect(self) -> None:
        h, lc = self.host, self.loading
        h.failed.connect(lc.on_reply_failed)  # before the reply's own handler, as the retry follows it
        h.load_started.connect(lc.on_load_started)
        h.download_progress.connect(lc.on_download_progress)
        h.loaded.connect(lc.on_loaded)
        h.load_failed.connect(lc.on_load_failed)
        h.load_cancelled.connect(lc.on_load_cancelled)
        self.replies.connect()
        c = self.conversations
        c.selected.connect(self.select_conversation)
        c.new_requested.connect(self.new_conversation)
        c.renamed.connect(self.rename_conversation)
        c.delete_requested.connect(self.delete_conversation)
        nav = self.navigation
        c.search_changed.connect(nav.search_changed)
        c.hit_chosen.connect(nav.open_hit)
        c.pin_requested.connect(nav.toggle_pin)
        self.chat.branch_requested.connect(nav.step_branch)
        h.loaded.connect(self.welcome_hint.model_loaded)
        v = self.chat
        v.send_requested.connect(self.send)
        v.edit_resend_requested.connect(self.edit_and_resend)
        v.stop_requested.connect(self.stop)
        v.regenerate_requested.connect(self.regenerate)
        # the Performance menu is built later (after the dock and View), hence the late lookup
        v.performance_requested.connect(lambda mid: self.performance.show_performance(mid))
        v.system_prompt_changed.connect(self._save_system_prompt)
        v.draft_changed.connect(self._save_draft)
        v.notify.connect(lambda msg: self.statusBar().showMessage(msg, 3000))
        # A file that cannot be attached stays said until dismissed: the user has to know it is not there.
        v.attach.notify.connect(lambda msg: self.info.show_message(msg, "error"))
        QGuiApplication.styleHints().colorSchemeChanged.connect(lambda _s: self.apply_theme())

    # -- settings -----------------------------------------------------------

    def open_settings(self) -> None:
        from app.settings_ui.settings_dialog import SettingsDialog  # only built when asked for

        dlg = SettingsDialog(self.settings, self, identity=self.host.identity, think=self.host.think)
        if dlg.exec() and dlg.result_settings is not None:
            self.apply_settings(dlg.result_settings)

    def apply_settings(self, new: Settings) -> None:
        """Adopt validated settings: save, re-theme, and reload the model if its set-up changed."""
        reload = load_changed(self.settings, new, self.host.identity) or not (self.host.ready or self.host.loading)
        self.settings = new
        self.save_settings()
        self.chat.system.set_presets(new.presets)
        self.apply_theme()
        self._apply_server()
        if self.voice is not None:
            self.voice.apply(new)
        if reload:
            self.load_model(new.load_request())

    def save_settings(self) -> None:
        """Write the settings the window holds; a failure is shown, never silent."""
        try:
            self.settings_file.save(self.settings)
        except (OSError, ValueError) as e:
            self.info.show_message(f"Could not save the settings: {e}", "error")

    def _adopt_settings(self, new: Settings) -> None:
        self.settings = new
        self.save_settings()
        if self.server_host.running:
            self.server_host.apply(new)  # the API's requests follow a model's own settings too

    def _apply_server(self) -> None:
        """Start, stop or re-key the local server as the settings say; a failure is shown, never silent."""
        self.replies.tools.apply(self.settings)  # the MCP servers too (connected off the GUI thread)
        err = self.server_host.apply(self.settings)
        if err:
            self.info.show_message(f"The local server did not start: {err}. Settings → Local server.", "error")

    def apply_theme(self) -> None:
        self.scheme = theme.apply(QApplication.instance(), self.settings.theme)
        self.chat.apply_colors(theme.BUBBLES[self.scheme])

    # -- conversations ------------------------------------------------------

    def _refresh_list(self, select: int | None) -> None:
        convs = self.store.list_conversations(self.conversations.search.text())
        self.conversations.populate(convs, select)
        if select is None and convs and not self.conversations.search.text():
            self.select_conversation(convs[0].id)

    def _leave_current(self) -> None:
        """Save what the user was typing in the conversation being left."""
        if self.current is None:
            return
        self.chat.system.flush()
        self.chat.flush_draft()  # drafts save on a timer; an edit in progress saved its draft already

    def select_conversation(self, cid: int) -> None:
        if cid != self.current:
            self.open_conversation(cid)

    def open_conversation(self, cid: int, before: Callable[[], None] | None = None) -> None:
        """Leave the conversation on screen (what was typed is saved), run ``before`` (e.g. pick
        a branch), then show ``cid`` and select it in the list."""
        self._leave_current()
        if before is not None:
            before()
        self.current = cid
        self._show_current()
        if self.conversations.current_id() != cid:
            self._refresh_list(select=cid)

    def _show_current(self) -> None:
        conv = self.store.conversation(self.current)
        msgs = self.store.messages(self.current)
        self.chat.show_conversation(conv.title, conv.system_prompt, conv.draft, msgs)
        self.replies.show_context(self.current, msgs)
        self.replies.show_live()
        self.replies.show_think()
        self.navigation.show_branches()
        self.replies.update_busy()

    def new_conversation(self) -> None:
        self._leave_current()
        prompt = self.settings.preset_prompt(self.settings.default_preset) or ""
        conv = self.store.create_conversation(system_prompt=prompt)
        self.conversations.search.clear()
        self.current = conv.id
        self._refresh_list(select=conv.id)
        self._show_current()
        self.chat.input.setFocus()

    def rename_conversation(self, cid: int, title: str) -> None:
        try:
            self.store.rename_conversation(cid, title)
        except ValueError as e:
            self.info.show_message(f"Not renamed: {e}.", "error", timeout_ms=6000)
        self._refresh_list(select=self.current)
        if cid == self.current:
            self.chat.title.setText(self.store.conversation(cid).title)

    def delete_conversation(self, cid: int) -> None:
        if self.replies.streaming_in() == cid:
            self.host.stop()  # the reply so far is saved; undo brings it back
        if cid == self.current:
            self._leave_current()
        title = self.store.conversation(cid).title
        self.store.delete_conversation(cid)
        if cid == self.current:
            self.current = None
        self._refresh_list(select=self.current)
        if self.current is None:
            remaining = self.store.list_conversations()
            if remaining:
                self.select_conversation(remaining[0].id)
            else:
                self.new_conversation()
        self.info.show_message(f"Deleted “{title}”.", "info", action=("Undo", lambda: self.undo_delete(cid)),
                               timeout_ms=15000)

    def undo_delete(self, cid: int) -> None:
        self.store.restore_conversation(cid)
        self.conversations.search.clear()
        self.select_conversation(cid)
        self._refresh_list(select=cid)

    def _save_system_prompt(self, text: str) -> None:
        if self.current is not None and not self._closed:
            self.store.set_system_prompt(self.current, text)

    def _save_draft(self, text: str) -> None:
        if self.current is not None and not self._closed:
            self.store.set_draft(self.current, text)

    # -- closing ------------------------------------------------------------

    def closeEvent(self, e) -> None:  # noqa: N802 (Qt override)
        if self._closed:
            return super().closeEvent(e)
        self._leave_current()
        self._closed = True
        self.hide()
        self.performance.close()  # a benchmark run stops first: its thread must not outlive the window
        if self.voice is not None:
            self.voice.close()  # the microphone closes and the voice stops
        self.replies.tools.close()  # a call waited for stops; the MCP servers' programs end
        self.server_host.shutdown()  # API clients are cut off first; then the engine thread ends
        self.host.shutdown()  # stops the reply (saved as incomplete) and frees the model
        GpuGuard(data_dir()).clear()  # a clean close: the next start may use the GPU
        self.store.close()
        super().closeEvent(e)

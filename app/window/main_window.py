"""The main window: builds the widgets, makes the controllers, connects the signals.

The window's parts are controllers it holds, each given what it needs in its
constructor: ``loading`` (model_loading.py: load, status bar, rollback, retries),
``navigation`` (search hits, versions, pins, export/import), ``keyboard`` (keys,
zoom, Help), ``view_menu`` (theme), ``welcome_hint`` and ``performance`` (the
Performance menu), ``agents`` (the Agents menu: coding agents in a terminal), ``replies``
(sending, and showing replies as they stream) and ``chats`` (the conversation on screen and
what the conversation list does). The window itself keeps the settings; names its
callers use for a controller's parts stay as Via attributes (via.py). Rules the parts keep together:
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

import dataclasses
import importlib
import sys

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QMainWindow, QSplitter, QVBoxLayout, QWidget

from engine.loading import GpuGuard
from engine.voice import voice_installed

from app.core.paths import data_dir
from app.library import library_dock
from app.ui import theme
from app.window.keyboard import KeyboardController
from app.window.agents_menu import AgentsMenu
from app.window.chats import ChatsController
from app.window.menus import MenuSlots, build_file_and_chat_menus
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
from app.bridge.load_runner import Opener, open_model
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
        # Claude Code, Codex CLI, OpenCode in a terminal, on this model
        self.agents = AgentsMenu(
            menu=self.menuBar().addMenu("&Agents"), parent=self, host=self.host, server=self.server_host,
            info=self.info, settings=lambda: self.settings,
            serve_locally=lambda: self.apply_settings(dataclasses.replace(self.settings, server_enabled=True)))
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
        self.chats.refresh_list(select=None)
        if self.current is None:
            self.new_conversation()
        self._apply_server()

    @property
    def current(self) -> int | None:
        """The conversation on screen (``chats`` owns it; tests set it)."""
        return self.chats.current

    @current.setter
    def current(self, cid: int | None) -> None:
        self.chats.current = cid

    # The window's public surface that its controllers own (see Via).
    load_model = Via("loading")
    start = Via("loading")
    show_memory_details = Via("loading")
    memory_details = Via("loading")
    model_label = Via("loading")
    memory_label = Via("loading")
    load_bar = Via("loading")
    cancel_load_button = Via("loading")
    select_conversation = Via("chats")
    open_conversation = Via("chats")
    new_conversation = Via("chats")
    rename_conversation = Via("chats")
    delete_conversation = Via("chats")
    undo_delete = Via("chats")
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
        self.chats = ChatsController(
            store=self.store, chat=self.chat, conversations=self.conversations, info=self.info,
            settings=lambda: self.settings, replies=lambda: self.replies,
            show_branches=lambda: self.navigation.show_branches(), stop_reply=self.host.stop,
            closed=lambda: self._closed)

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
            open_settings=self.open_settings, refresh_list=self.chats.refresh_list,
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
            open_conversation=self.open_conversation, show_current=self.chats.show_current,
            refresh_list=self.chats.refresh_list)

        acts = build_file_and_chat_menus(self.menuBar(), self, MenuSlots(
            new_chat=self.new_conversation, settings=self.open_settings, import_chat=self.navigation.ask_import,
            export_chat=self.navigation.ask_export, quit=self.close, stop=self.stop,
            regenerate=self.replies.regenerate_last, rename=self.conversations.begin_rename,
            chat_settings=lambda: self.replies.reply_settings.edit_chat_settings(self)))
        self.act_new, self.act_settings, self.act_stop, self.act_regen = (
            acts.new, acts.settings, acts.stop, acts.regenerate)

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
        v.system_prompt_changed.connect(self.chats.save_system_prompt)
        v.draft_changed.connect(self.chats.save_draft)
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

    # -- closing ------------------------------------------------------------

    def closeEvent(self, e) -> None:  # noqa: N802 (Qt override)
        if self._closed:
            return super().closeEvent(e)
        self.chats.leave_current()
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

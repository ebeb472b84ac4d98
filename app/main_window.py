"""The main window: wires the conversation list, the chat view, the store and the engine.

Rules this file keeps:
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

import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (QApplication, QLabel, QMainWindow, QProgressBar, QPushButton,
                               QSplitter, QVBoxLayout, QWidget)

from engine import HearthError, Message

from . import theme
from .chat_view import ChatView
from .conversation_list import ConversationList
from .info_bar import InfoArea
from .loop_monitor import LoopMonitor
from .settings import BUNDLED, Settings, SettingsFile
from .store import Store
from .text_utils import human_bytes
from .worker import EngineHost, GenerationJob


class MainWindow(QMainWindow):
    def __init__(self, *, settings_file: SettingsFile | None = None, store: Store | None = None) -> None:
        super().__init__()
        self.setWindowTitle("Hearth")
        self.setWindowIcon(theme.app_icon())
        self.resize(1100, 760)
        self.settings_file = settings_file or SettingsFile()
        self.settings, settings_notice = self.settings_file.load()
        self.store = store or Store()
        self.store.purge_deleted()
        self.scheme = theme.apply(QApplication.instance(), self.settings.theme)
        self.host = EngineHost(self)
        self.monitor = LoopMonitor(self)
        self.current: int | None = None
        self.stream: dict | None = None  # {conv, mid, user_mid, user_text, parts, title}
        self._load_key: dict | None = None
        self._rolling_back = False
        self.last_stats: dict | None = None
        self._closed = False

        self._build_ui()
        self._connect()
        for notice in (settings_notice, self.store.notice):
            if notice:
                self.info.show_message(notice, "error")
        self._refresh_list(select=None)
        if self.current is None:
            self.new_conversation()

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
        self.load_bar = QProgressBar()
        self.load_bar.setRange(0, 0)  # llama.cpp loads in one call: a busy bar, not a fake percentage
        self.load_bar.setMaximumWidth(120)
        self.load_bar.hide()
        self._load_started = 0.0
        self._load_what = ""
        self._load_clock = QTimer(self)
        self._load_clock.setInterval(1000)  # big models take minutes: show that time is passing
        self._load_clock.timeout.connect(self._show_load_time)
        self.cancel_load_button = QPushButton("Cancel loading")
        self.cancel_load_button.clicked.connect(self.cancel_load)
        self.cancel_load_button.hide()
        self.stats_label = QLabel()
        self.stats_label.setToolTip("Live while a reply streams; then the last reply's numbers")
        self.model_label = QLabel("No model loaded")
        self.memory_label = QLabel()
        self.memory_label.setToolTip("Memory the loaded model allocated (weights, KV cache, compute buffers)")
        sb.addWidget(self.load_bar)
        sb.addWidget(self.cancel_load_button)
        sb.addPermanentWidget(self.stats_label)
        sb.addPermanentWidget(self.model_label)
        sb.addPermanentWidget(self.memory_label)

        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self.act_new = self._action(file_menu, "&New chat", QKeySequence.StandardKey.New, self.new_conversation)
        self.act_settings = self._action(file_menu, "&Settings…", QKeySequence("Ctrl+,"), self.open_settings)
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", QKeySequence.StandardKey.Quit, self.close)
        chat_menu = menu.addMenu("&Chat")
        self.act_stop = self._action(chat_menu, "&Stop reply", QKeySequence("Ctrl+."), self.stop)
        self.act_regen = self._action(chat_menu, "&Regenerate last reply", QKeySequence("Ctrl+R"),
                                      self._regenerate_last)
        self._action(chat_menu, "Re&name conversation", QKeySequence("F2"), self.conversations.begin_rename)

    def _action(self, menu, text: str, shortcut, slot) -> QAction:
        act = QAction(text, self)
        act.setShortcut(shortcut)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _connect(self) -> None:
        h = self.host
        h.load_started.connect(self._on_load_started)
        h.loaded.connect(self._on_loaded)
        h.load_failed.connect(self._on_load_failed)
        h.load_cancelled.connect(self._on_load_cancelled)
        h.delta.connect(self._on_delta)
        h.progress.connect(self._on_progress)
        h.finished.connect(self._on_finished)
        h.failed.connect(self._on_failed)
        c = self.conversations
        c.selected.connect(self.select_conversation)
        c.new_requested.connect(self.new_conversation)
        c.renamed.connect(self.rename_conversation)
        c.delete_requested.connect(self.delete_conversation)
        c.search_changed.connect(lambda _t: self._refresh_list(select=self.current))
        v = self.chat
        v.send_requested.connect(self.send)
        v.edit_resend_requested.connect(self.edit_and_resend)
        v.stop_requested.connect(self.stop)
        v.regenerate_requested.connect(self.regenerate)
        v.system_prompt_changed.connect(self._save_system_prompt)
        v.draft_changed.connect(self._save_draft)
        v.notify.connect(lambda msg: self.statusBar().showMessage(msg, 3000))
        QGuiApplication.styleHints().colorSchemeChanged.connect(lambda _s: self.apply_theme())

    # -- start-up and model loading -----------------------------------------

    def start(self) -> None:
        """Begin loading the configured model (call after show(), so the window is up first)."""
        self.load_model(self.settings.load_key())

    def load_model(self, key: dict) -> None:
        if self.host.job is not None:
            self.host.stop()  # the load waits for the reply to end; make that quick
        self._load_key = dict(key)
        self.monitor.begin("loading")
        self._on_load_started(self._describe_key(key))  # say so now, not when the thread gets to it
        self.host.load(key)

    def cancel_load(self) -> None:
        self.host.cancel_load()
        self.cancel_load_button.setEnabled(False)
        self.statusBar().showMessage("Cancelling: the current load step has to finish first…")

    def _describe_key(self, key: dict | None) -> str:
        model = (key or {}).get("model", BUNDLED)
        return "the bundled model" if model in (None, "", BUNDLED) else Path(model).name

    def _on_load_started(self, what: str) -> None:
        if self._load_clock.isActive() and what == self._load_what:
            return  # the engine thread confirming what the window already shows
        self._load_what = what
        self._load_started = time.monotonic()
        self._load_clock.start()
        self.load_bar.show()
        self.cancel_load_button.setEnabled(True)
        self.cancel_load_button.show()
        self.model_label.setText(f"Loading {what}…")
        self.memory_label.setText("")

    def _show_load_time(self) -> None:
        self.model_label.setText(f"Loading {self._load_what}… {time.monotonic() - self._load_started:.0f} s")

    def _end_loading(self) -> None:
        self._load_clock.stop()
        self.monitor.end("loading")
        self.load_bar.hide()
        self.cancel_load_button.hide()
        self.statusBar().clearMessage()

    def _on_loaded(self, info: dict) -> None:
        self._end_loading()
        self.model_label.setText(f"{info['label']} · {info['quant']} · context {info['n_ctx']:,}")
        self.model_label.setToolTip(f"{info['path']}\nbackend: {info['backend']}\n"
                                    f"loaded in {info.get('load_ms', 0):.0f} ms")
        self.memory_label.setText(f"Memory {human_bytes(info['memory_total'])}")
        self.memory_label.setToolTip("\n".join(f"{k}: {human_bytes(v)}" for k, v in info["memory"].items()
                                               if "@" not in k))
        if self._load_key == self.settings.load_key():
            try:
                self.settings_file.mark_working(self.settings)
            except OSError as e:
                self.info.show_message(f"Could not save the settings: {e}", "error")
        self._rolling_back = False

    def _on_load_failed(self, msg: str) -> None:
        self._end_loading()
        self._fail_load(f"Could not load {self._describe_key(self._load_key)}: {msg}")

    def _on_load_cancelled(self) -> None:
        self._end_loading()
        self._fail_load(f"Loading {self._describe_key(self._load_key)} was cancelled.")

    def _fail_load(self, text: str) -> None:
        self.model_label.setText("No model loaded")
        target = self.settings_file.rolled_back(self.settings)
        if not self._rolling_back and target.load_key() != self._load_key:
            # Go back to what last worked, and make that the saved choice again.
            self._rolling_back = True
            self.settings = target
            self._save_settings()
            self.info.show_message(f"{text} Went back to {self._describe_key(target.load_key())}, "
                                   "the last model that worked.", "error")
            self.load_model(target.load_key())
            return
        self._rolling_back = False
        self.info.show_message(f"{text} No model is loaded; choose one in Settings.", "error",
                               action=("Settings…", self.open_settings))

    def _save_settings(self) -> None:
        try:
            self.settings_file.save(self.settings)
        except (OSError, ValueError) as e:
            self.info.show_message(f"Could not save the settings: {e}", "error")

    # -- settings -----------------------------------------------------------

    def open_settings(self) -> None:
        from .settings_dialog import SettingsDialog  # only built when asked for

        dlg = SettingsDialog(self.settings, self)
        if dlg.exec() and dlg.result_settings is not None:
            self.apply_settings(dlg.result_settings)

    def apply_settings(self, new: Settings) -> None:
        """Adopt validated settings: save, re-theme, and reload the model if its set-up changed."""
        reload = new.load_key() != self.settings.load_key() or not (self.host.ready or self.host.loading)
        self.settings = new
        self._save_settings()
        self.chat.system.set_presets(new.presets)
        self.apply_theme()
        if reload:
            self.load_model(new.load_key())

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
        if cid == self.current:
            return
        self._leave_current()
        self.current = cid
        self._show_current()
        if self.conversations.current_id() != cid:
            self._refresh_list(select=cid)

    def _show_current(self) -> None:
        conv = self.store.conversation(self.current)
        msgs = self.store.messages(self.current)
        self.chat.show_conversation(conv.title, conv.system_prompt, conv.draft, msgs)
        s = self.stream
        if s is not None and s["conv"] == self.current:
            # The store lags the stream by up to half a second; show the live text.
            w = self.chat.widget(s["mid"])
            if w is not None:
                w.text = "".join(s["parts"])
                w.set_streaming(True)
        self._update_busy()

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
        if self.stream is not None and self.stream["conv"] == cid:
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

    # -- sending ------------------------------------------------------------

    def _can_send(self) -> bool:
        """Say clearly why a message cannot go now; the text stays in the input box."""
        if self.host.job is not None:
            where = self.stream["title"] if self.stream else "another conversation"
            self.info.show_message(f"A reply is still being written in “{where}”. Stop it or wait for it, "
                                   "then send again — your text is still in the box.", "error",
                                   timeout_ms=8000)
            return False
        if self.host.loading:
            self.info.show_message("The model is still loading. Your message is still in the box: press "
                                   "Enter again when the status bar shows the model.", "error",
                                   timeout_ms=8000)
            return False
        if not self.host.ready:
            self.info.show_message("No model is loaded, so nothing can reply. Choose a model in Settings; "
                                   "your message is still in the box.", "error",
                                   action=("Settings…", self.open_settings))
            return False
        return True

    def send(self, text: str) -> None:
        if self.current is None or not text.strip() or not self._can_send():
            return
        self.chat.system.flush()
        cid = self.current
        user_mid = self.store.add_message(cid, "user", text)
        self.chat.add_message(user_mid, "user", text)
        self.chat.set_input_text("")
        self.store.set_draft(cid, "")
        self._start_reply(cid, user_mid, text)

    def edit_and_resend(self, mid: int, text: str) -> None:
        if self.current is None or not self._can_send():
            return
        cid = self.current
        self.store.hide_from(cid, mid)
        self.chat.remove_from(mid)
        self.chat.finish_edit()
        user_mid = self.store.add_message(cid, "user", text)
        self.chat.add_message(user_mid, "user", text)
        self._start_reply(cid, user_mid, text)

    def regenerate(self, mid: int) -> None:
        if self.current is None or not self._can_send():
            return
        msgs = self.store.messages(self.current)
        if not msgs or msgs[-1].id != mid or msgs[-1].role != "assistant":
            return
        self.store.hide_message(mid)
        self.chat.remove_from(mid)
        self._start_reply(self.current, None, None)

    def _regenerate_last(self) -> None:
        msgs = self.store.messages(self.current) if self.current is not None else []
        if msgs and msgs[-1].role == "assistant":
            self.regenerate(msgs[-1].id)

    def _history(self, cid: int) -> list[Message]:
        conv = self.store.conversation(cid)
        out = [Message("system", conv.system_prompt)] if conv.system_prompt.strip() else []
        # Cut-short replies stay in the history: the user saw them, so the model should too.
        out += [Message(m.role, m.content) for m in self.store.messages(cid) if m.content]
        return out

    def _start_reply(self, cid: int, user_mid: int | None, user_text: str | None) -> None:
        history = self._history(cid)
        mid = self.store.begin_reply(cid)
        title = self.store.conversation(cid).title
        self.stream = {"conv": cid, "mid": mid, "user_mid": user_mid, "user_text": user_text,
                       "parts": [], "title": title}
        job = GenerationJob(cid, mid, history, self.settings.sampling_params(), self.store.path)
        w = self.chat.add_message(mid, "assistant", "")
        w.set_streaming(True)
        self.stats_label.setText("Waiting for the first token…")
        self.monitor.begin("streaming")
        self.host.generate(job)
        self._update_busy()
        self._refresh_list(select=self.current)  # the first message may have named the conversation
        self.chat.title.setText(self.store.conversation(self.current).title)

    def stop(self) -> None:
        self.host.stop()

    def _update_busy(self) -> None:
        s = self.stream
        where = s["title"] if s is not None and s["conv"] != self.current else ""
        self.chat.set_busy(s is not None, where)

    # -- stream events ------------------------------------------------------

    def _on_delta(self, mid: int, text: str) -> None:
        s = self.stream
        if s is None or s["mid"] != mid:
            return
        s["parts"].append(text)
        if s["conv"] == self.current:
            w = self.chat.widget(mid)
            if w is not None:
                w.append(text)

    def _on_progress(self, mid: int, p: dict) -> None:
        self.stats_label.setText(f"{p['tok_s']:.1f} tok/s · TTFT {p['ttft_ms']:.0f} ms · "
                                 f"{p['tokens']} tokens")

    def _end_stream(self) -> dict | None:
        s, self.stream = self.stream, None
        self.monitor.end("streaming")
        self._update_busy()
        return s

    def _on_finished(self, mid: int, result: dict) -> None:
        s = self._end_stream()
        m = result.get("metrics") or {}
        self.last_stats = m
        cached = f" · cached {m.get('cached_tokens', 0)}/{m.get('prompt_tokens', 0)} prompt tokens"
        spec = m.get("spec") or {}
        accept = (f" · draft acceptance {100 * spec['acceptance_rate']:.0f}%"
                  if spec.get("acceptance_rate") is not None else "")
        self.stats_label.setText(f"{m.get('decode_tok_s', 0.0):.1f} tok/s · TTFT {m.get('ttft_ms', 0.0):.0f} ms"
                                 f"{cached}{accept}")
        if s is not None and s["conv"] == self.current:
            w = self.chat.widget(mid)
            if w is not None:
                w.set_result(result["text"], complete=result["complete"],
                             finish_reason=result["finish_reason"], metrics=result.get("metrics"))
            self.chat.refresh_actions()

    def _on_failed(self, mid: int, msg: str, partial: str) -> None:
        s = self._end_stream()
        self.stats_label.setText("")
        if s is None or self._closed:
            return
        if not partial and s["user_mid"] is not None:
            # Nothing came back: undo the send and give the text back to the user.
            self.store.hide_from(s["conv"], s["user_mid"])
            here = s["conv"] == self.current
            typed = self.chat.input_text() if here else self.store.conversation(s["conv"]).draft
            # Anything typed since is kept too, after the returned message.
            text = s["user_text"] if not typed.strip() else f"{s['user_text']}\n\n{typed}"
            self.store.set_draft(s["conv"], text)
            if here:
                self.chat.remove_from(s["user_mid"])
                self.chat.set_input_text(text)
            self.info.show_message(f"The message was not sent: {msg}. Your text is back in the input box.",
                                   "error")
        else:
            if s["conv"] == self.current:
                w = self.chat.widget(mid)
                if w is not None:
                    w.set_result(partial, complete=False, finish_reason="error", error=msg)
            self.info.show_message(f"The reply stopped with an error: {msg}. What was written is kept.",
                                   "error")
        self.chat.refresh_actions()

    # -- closing ------------------------------------------------------------

    def closeEvent(self, e) -> None:  # noqa: N802 (Qt override)
        if self._closed:
            return super().closeEvent(e)
        self._leave_current()
        self._closed = True
        self.hide()
        self.host.shutdown()  # stops the reply (saved as incomplete) and frees the model
        self.store.close()
        super().closeEvent(e)

"""The right-hand side: system prompt, the messages of one conversation, the input box.

The view only displays and reports what the user asked for (signals); the
main window decides what happens and talks to the store and the engine.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QKeyEvent
from PySide6.QtWidgets import (QComboBox, QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton,
                               QScrollArea, QSizePolicy, QToolButton, QVBoxLayout, QWidget)

from .message_widget import MessageWidget
from .store import StoredMessage

CUSTOM = "Custom"


class InputBox(QPlainTextEdit):
    """Enter sends, Shift+Enter adds a new line, Escape cancels an edit."""

    submitted = Signal()
    escaped = Signal()

    def keyPressEvent(self, e: QKeyEvent) -> None:  # noqa: N802 (Qt override)
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if e.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            return
        if e.key() == Qt.Key.Key_Escape:
            self.escaped.emit()
            return
        super().keyPressEvent(e)


class SystemPromptBar(QWidget):
    """Preset picker plus an editor for the conversation's own system prompt."""

    changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._presets: list[dict[str, str]] = []
        self._quiet = False
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(QLabel("System prompt:"))
        self.combo = QComboBox()
        self.combo.setToolTip("Start from a preset, or choose Custom and write your own")
        self.combo.activated.connect(self._picked)
        row.addWidget(self.combo, 1)
        self.toggle = QToolButton()
        self.toggle.setText("Edit")
        self.toggle.setCheckable(True)
        self.toggle.setToolTip("Show or hide this conversation's system prompt")
        row.addWidget(self.toggle)
        lay.addLayout(row)
        self.editor = QPlainTextEdit()
        self.editor.setPlaceholderText("Instructions the model sees before every message in this conversation")
        self.editor.setMaximumHeight(90)
        self.editor.hide()
        self.toggle.toggled.connect(self.editor.setVisible)
        self._save_timer = QTimer(self)
        self._save_timer.setSingleShot(True)
        self._save_timer.setInterval(400)  # save after a pause in typing, not on every key
        self._save_timer.timeout.connect(lambda: self.changed.emit(self.text()))
        self.editor.textChanged.connect(self._edited)
        lay.addWidget(self.editor)

    def set_presets(self, presets: list[dict[str, str]]) -> None:
        self._presets = list(presets)
        self._sync_combo()

    def text(self) -> str:
        return self.editor.toPlainText()

    def set_text(self, text: str) -> None:
        """Show a conversation's prompt without reporting it as a change."""
        self._quiet = True
        self.editor.setPlainText(text)
        self._quiet = False
        self._sync_combo()

    def flush(self) -> None:
        """Report a pending edit now (e.g. before switching conversation or sending)."""
        if self._save_timer.isActive():
            self._save_timer.stop()
            self.changed.emit(self.text())

    def _edited(self) -> None:
        if self._quiet:
            return
        self._sync_combo()
        self._save_timer.start()

    def _sync_combo(self) -> None:
        text = self.text()
        self.combo.blockSignals(True)
        self.combo.clear()
        for p in self._presets:
            self.combo.addItem(p["name"])
        self.combo.addItem(CUSTOM)
        match = next((i for i, p in enumerate(self._presets) if p["prompt"] == text), None)
        self.combo.setCurrentIndex(match if match is not None else len(self._presets))
        self.combo.blockSignals(False)

    def _picked(self, index: int) -> None:
        if index < len(self._presets):
            self.editor.setPlainText(self._presets[index]["prompt"])
            self.flush()
        else:
            self.toggle.setChecked(True)
            self.editor.setFocus()


class ChatView(QWidget):
    send_requested = Signal(str)
    edit_resend_requested = Signal(int, str)   # message id being replaced, new text
    stop_requested = Signal()
    regenerate_requested = Signal(int)
    system_prompt_changed = Signal(str)
    draft_changed = Signal(str)
    notify = Signal(str)

    def __init__(self, colors: dict[str, str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.colors = colors
        self._widgets: dict[int, MessageWidget] = {}
        self._editing: int | None = None
        self._saved_draft = ""
        self._busy = False

        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 8)
        self.title = QLabel()
        self.title.setStyleSheet("font-size: 16px; font-weight: 600;")
        lay.addWidget(self.title)
        self.system = SystemPromptBar()
        self.system.changed.connect(self.system_prompt_changed)
        lay.addWidget(self.system)

        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._page = QWidget()
        self._list = QVBoxLayout(self._page)
        self._list.setContentsMargins(4, 4, 12, 4)
        self._list.setSpacing(10)
        self._list.addStretch(1)
        self.empty = QLabel("Say something to start the conversation.")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setStyleSheet("color: palette(placeholder-text);")
        self._list.insertWidget(0, self.empty)
        # Where the model's view of the conversation begins, once it outgrew the context.
        self.context_marker = QLabel()
        self.context_marker.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.context_marker.setWordWrap(True)
        self.context_marker.setStyleSheet("color: palette(placeholder-text); font-style: italic;")
        self.context_marker.hide()
        self._marker_mid: int | None = None
        self.scroll.setWidget(self._page)
        self._stick = True
        bar = self.scroll.verticalScrollBar()
        bar.valueChanged.connect(lambda v: setattr(self, "_stick", v >= bar.maximum() - 8))
        bar.rangeChanged.connect(lambda _lo, hi: bar.setValue(hi) if self._stick else None)
        lay.addWidget(self.scroll, 1)

        self.edit_banner = QLabel()
        self.edit_banner.setStyleSheet("color: palette(link);")
        self.edit_banner.hide()
        lay.addWidget(self.edit_banner)
        row = QHBoxLayout()
        self.input = InputBox()
        self.input.setPlaceholderText("Message Hearth — Enter sends, Shift+Enter adds a line")
        self.input.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.input.setFixedHeight(84)
        self.input.submitted.connect(self._submit)
        self.input.escaped.connect(self.cancel_edit)
        self.input.textChanged.connect(self._draft_edited)
        row.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        self.send_button = QPushButton("Send")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self._submit)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the reply; the text written so far is kept")
        self.stop_button.clicked.connect(self.stop_requested)
        self.stop_button.hide()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        row.addLayout(buttons)
        lay.addLayout(row)
        self._draft_timer = QTimer(self)
        self._draft_timer.setSingleShot(True)
        self._draft_timer.setInterval(500)
        self._draft_timer.timeout.connect(lambda: self.draft_changed.emit(self.input.toPlainText()))
        self._loading_draft = False

    # -- conversation -------------------------------------------------------

    def show_conversation(self, title: str, system_prompt: str, draft: str,
                          messages: list[StoredMessage]) -> None:
        self.cancel_edit()
        self.clear()
        self.title.setText(title)
        self.system.set_text(system_prompt)
        for m in messages:
            w = self.add_message(m.id, m.role, m.content)
            if m.role == "assistant":
                w.set_result(m.content, complete=m.complete, finish_reason=m.finish_reason,
                             error=m.error, metrics=m.metrics)
        self.set_input_text(draft)
        self._stick = True
        self.refresh_actions()

    def clear(self) -> None:
        for w in self._widgets.values():
            self._list.removeWidget(w)
            w.deleteLater()
        self._widgets.clear()
        self.set_context_marker(None)
        self.empty.show()

    def set_context_marker(self, mid: int | None, count: int = 0, *, n_ctx: int = 0) -> None:
        """Mark that the ``count`` messages above message ``mid`` are outside the model's
        context (None: no marker)."""
        m = self.context_marker
        self._list.removeWidget(m)
        w = self._widgets.get(mid) if mid is not None else None
        self._marker_mid = mid if w is not None else None
        if w is None:
            m.hide()
            return
        what = "1 earlier message is" if count == 1 else f"{count:,} earlier messages are"
        m.setText(f"— {what} outside the model's context —")
        m.setToolTip(f"The conversation outgrew the model's context window ({n_ctx:,} tokens), so the last "
                     "reply was written without the messages above this line; the system prompt was kept. "
                     "They stay here and in the history.")
        self._list.insertWidget(self._list.indexOf(w), m)
        m.show()

    def add_message(self, mid: int, role: str, content: str) -> MessageWidget:
        w = MessageWidget(mid, role, content, colors=self.colors)
        w.copy_requested.connect(self._copy)
        w.notify.connect(self.notify)
        w.edit_requested.connect(self.start_edit)
        w.regenerate_requested.connect(self.regenerate_requested)
        self._list.insertWidget(self._list.count() - 1, w)
        self._widgets[mid] = w
        self.empty.hide()
        self._stick = True
        return w

    def widget(self, mid: int) -> MessageWidget | None:
        return self._widgets.get(mid)

    def message_widgets(self) -> list[MessageWidget]:
        return list(self._widgets.values())

    def remove_from(self, mid: int) -> None:
        """Drop message ``mid`` and every later one from the view."""
        for k in [k for k in self._widgets if k >= mid]:
            w = self._widgets.pop(k)
            self._list.removeWidget(w)
            w.deleteLater()
        if self._marker_mid is not None and self._marker_mid >= mid:
            self.set_context_marker(None)
        self.empty.setVisible(not self._widgets)

    def apply_colors(self, colors: dict[str, str]) -> None:
        self.colors = colors
        for w in self._widgets.values():
            w.apply_colors(colors)

    # -- state --------------------------------------------------------------

    def set_busy(self, busy: bool, where: str = "") -> None:
        """A reply is streaming (here or in another conversation named ``where``)."""
        self._busy = busy
        self.stop_button.setVisible(busy)
        self.stop_button.setToolTip("Stop the reply; the text written so far is kept"
                                    + (f" (writing in “{where}”)" if where else ""))
        self.refresh_actions()

    def refresh_actions(self) -> None:
        """Only the last reply can be regenerated, and not while anything streams."""
        ws = list(self._widgets.values())
        for w in ws:
            w.set_can_regenerate(False)
            w.btn_edit.setEnabled(not self._busy)
        if ws and ws[-1].role == "assistant" and not self._busy:
            ws[-1].set_can_regenerate(True)

    # -- input --------------------------------------------------------------

    def input_text(self) -> str:
        return self.input.toPlainText()

    def set_input_text(self, text: str) -> None:
        self._loading_draft = True
        self.input.setPlainText(text)
        self.input.moveCursor(self.input.textCursor().MoveOperation.End)
        self._loading_draft = False

    def flush_draft(self) -> None:
        if self._draft_timer.isActive():
            self._draft_timer.stop()
            self.draft_changed.emit(self.input.toPlainText())

    def _draft_edited(self) -> None:
        if not self._loading_draft and self._editing is None:
            self._draft_timer.start()

    @property
    def editing(self) -> int | None:
        return self._editing

    def start_edit(self, mid: int) -> None:
        w = self._widgets.get(mid)
        if w is None or self._busy:
            return
        if self._editing is None:
            self.flush_draft()
            self._saved_draft = self.input_text()
        self._editing = mid
        self.edit_banner.setText("Editing a message: Enter resends it and replaces everything after it; "
                                 "Escape cancels.")
        self.edit_banner.show()
        self.set_input_text(w.text)
        self.input.setFocus()

    def cancel_edit(self) -> None:
        if self._editing is None:
            return
        self._editing = None
        self.edit_banner.hide()
        self.set_input_text(self._saved_draft)

    def finish_edit(self) -> None:
        """The edited message was accepted: leave edit mode and bring back the draft."""
        self._editing = None
        self.edit_banner.hide()
        self.set_input_text(self._saved_draft)

    def _submit(self) -> None:
        text = self.input_text()
        if not text.strip():
            return
        if self._editing is not None:
            self.edit_resend_requested.emit(self._editing, text)
        else:
            self.send_requested.emit(text)

    def _copy(self, text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        self.notify.emit("Copied to the clipboard.")

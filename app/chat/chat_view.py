"""The right-hand side: system prompt, the messages of one conversation, the input box.

The view only displays and reports what the user asked for (signals); the
main window decides what happens and talks to the store and the engine.
"""
from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPushButton,
                               QScrollArea, QSizePolicy, QVBoxLayout, QWidget)

from app.ui import theme
from app.chat.attach_tray import AttachTray
from app.chat.context_divider import ContextDivider
from app.chat.chat_input import InputBox, SystemPromptBar
from app.chat.message_widget import MessageWidget
from app.chat.think_control import ThinkBox
from app.chat.tool_card import ToolCard, stored_card
from app.core import tool_steps
from app.core.context_meter import Divider
from app.chat.welcome import WelcomePanel
from app.core.store import StoredMessage
from engine.prompt import ToolCall

BATCH = 20  # messages built at a time: about a screenful; earlier ones are built when scrolled to


class ChatView(QWidget):
    can_speak = False  # replies get a Speak button: set where voice is installed (app/voice)
    send_requested = Signal(str)
    edit_resend_requested = Signal(int, str)   # message id being replaced, new text
    stop_requested = Signal()
    regenerate_requested = Signal(int)
    performance_requested = Signal(int)  # message id: open that reply's Performance panel
    speak_requested = Signal(int, str)   # a reply's Speak button: its id and text (app/voice)
    branch_requested = Signal(int, int)        # message id, -1 / +1
    edit_last_requested = Signal()             # Up in the empty input box
    system_prompt_changed = Signal(str)
    pin_requested = Signal(int, bool)          # message id, pinned: kept in the model's view however long the chat
    summary_edited = Signal(int, str)          # summary id, the user's words for it
    draft_changed = Signal(str)
    notify = Signal(str)

    def __init__(self, colors: dict[str, str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.colors = colors
        self._widgets: dict[int, MessageWidget] = {}  # built messages, oldest first
        self._pending: list[StoredMessage] = []        # older messages not built yet, oldest first
        self._results: dict[str | None, StoredMessage] = {}  # tool results by call id (shown on cards)
        self._grown_from: int | None = None            # the scroll range before earlier messages came
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
        self.empty = WelcomePanel()  # an empty chat shows the welcome and example prompts
        self.empty.prompt_chosen.connect(self._example)
        self._list.insertWidget(0, self.empty)
        # Where the model's view of the conversation begins, once it outgrew the context, and its summary.
        self.divider = ContextDivider(self._list, self._page)
        self.context_marker, self.summary_block = self.divider.label, self.divider.block
        self.summary_block.edited.connect(self.summary_edited)
        self.scroll.setWidget(self._page)
        self._stick = True
        bar = self.scroll.verticalScrollBar()
        bar.valueChanged.connect(self._scrolled)
        bar.rangeChanged.connect(self._range_changed)
        lay.addWidget(self.scroll, 1)

        self.edit_banner = QLabel()
        self.edit_banner.setStyleSheet("color: palette(link);")
        self.edit_banner.hide()
        lay.addWidget(self.edit_banner)
        self.read_attachment: Callable[[str], bytes] | None = None  # the store's, for the images' thumbnails
        self.attach = AttachTray()  # documents going with the next message (its notices: the window's)
        lay.addWidget(self.attach)
        row = QHBoxLayout()
        self.input = InputBox()
        self.input.files_dropped.connect(self.attach.add_paths)
        self.input.image_pasted.connect(lambda data: self.attach.add_image(data, "Pasted image"))
        self.input.setPlaceholderText("Message Hearth — Enter sends, Shift+Enter adds a line")
        self.input.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.input.submitted.connect(self._submit)
        self.input.escaped.connect(self._escaped)
        self.input.up_in_empty.connect(self.edit_last_requested)
        self.input.textChanged.connect(self._draft_edited)
        row.addWidget(self.input, 1)
        self.buttons = buttons = QVBoxLayout()  # Send, Stop, Think; the microphone where voice is installed
        self.send_button = QPushButton("Send")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self._submit)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the reply; the text written so far is kept")
        self.stop_button.clicked.connect(self.stop_requested)
        self.stop_button.hide()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        self.think = ThinkBox()  # shown only where the model's template offers a Think control
        buttons.addWidget(self.think)
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
        """Show a conversation: only the last BATCH messages are built now; earlier
        ones are built when the user scrolls up to them (or a search hit needs one)."""
        self.cancel_edit()
        self.clear()
        self.title.setText(title)
        self.system.set_text(system_prompt)
        # A tool's result is shown on its call's card, in the reply step that made the call.
        self._results = {m.tool_call_id: m for m in messages if m.role == "tool"}
        self._pending = [m for m in messages if m.role != "tool"]
        self._build_earlier(BATCH)
        self.set_input_text(draft)
        self._stick = True
        self.refresh_actions()

    def _build(self, m: StoredMessage, index: int) -> MessageWidget:
        w = self._make_widget(m.id, m.role, m.content, index)
        if m.parts:
            w.show_documents(m.parts, self.read_attachment)
        w.set_pinned(m.pinned)
        if m.role == "assistant":
            w.set_result(m.content, complete=m.complete, finish_reason=m.finish_reason, error=m.error,
                         metrics=m.metrics, reasoning=m.reasoning, reasoning_open=m.reasoning_open,
                         reasoning_tokens=m.reasoning_tokens)
        for call in m.tool_calls:
            w.add_tool_card(stored_card(call, self._results.get(call.id)))
        return w

    def tool_card(self, mid: int, call: ToolCall, server: str, tool: str) -> ToolCard:
        """A new card for a call of reply step ``mid`` (which must be on screen)."""
        card = ToolCard(call.id, tool, server, tool_steps.shown_arguments(call))
        w = self._widgets[mid]
        w.add_tool_card(card)
        self._stick = True
        return card

    def _build_earlier(self, count: int) -> int:
        """Build up to ``count`` of the not-yet-built messages just above the built ones."""
        take = self._pending[-count:] if count > 0 else []
        if not take:
            return 0
        del self._pending[-len(take):]
        top = self._list.indexOf(self.empty) + 1
        built = {m.id: self._build(m, top + i) for i, m in enumerate(take)}
        self._widgets = {**built, **self._widgets}
        self.divider.built(self._widgets)
        self.refresh_actions()
        return len(take)

    def pending_count(self) -> int:
        """Messages of the conversation on screen that are not built yet."""
        return len(self._pending)

    def ensure_built(self, mid: int) -> MessageWidget | None:
        """Build everything from message ``mid`` down, so it can be shown (None: not here)."""
        place = next((i for i, m in enumerate(self._pending) if m.id == mid), None)
        if place is not None:
            self._stick = False
            self._build_earlier(len(self._pending) - place)
        return self._widgets.get(mid)

    def scroll_to(self, mid: int) -> MessageWidget | None:
        """Bring message ``mid`` into view and mark it briefly."""
        w = self.ensure_built(mid)
        if w is not None:
            self._stick = False
            w.flash()
            QTimer.singleShot(0, lambda: self.scroll.ensureWidgetVisible(w, 0, 40))
        return w

    def _scrolled(self, value: int) -> None:
        bar = self.scroll.verticalScrollBar()
        self._stick = value >= bar.maximum() - 8
        if self._pending and value <= bar.minimum() and bar.maximum() > 0:
            self._grown_from = bar.maximum()
            self._build_earlier(BATCH)

    def _range_changed(self, _lo: int, hi: int) -> None:
        bar = self.scroll.verticalScrollBar()
        if self._grown_from is not None:
            # Earlier messages came in above: keep the one the user was reading in place.
            grown, self._grown_from = hi - self._grown_from, None
            bar.setValue(bar.value() + grown)
        elif self._stick:
            bar.setValue(hi)
        if hi == 0 and self._pending:  # the built ones do not fill the view yet
            QTimer.singleShot(0, lambda: self._build_earlier(BATCH) if not
                              self.scroll.verticalScrollBar().maximum() else None)

    def clear(self) -> None:
        for w in self._widgets.values():
            self._list.removeWidget(w)
            w.deleteLater()
        self._widgets.clear()
        self._pending = []
        self.set_divider(None)
        self.empty.show()

    def set_divider(self, divider: Divider | None) -> None:
        """Mark where the model's view begins, with the summary it reads (None: it sees everything)."""
        self.divider.set(divider, self._widgets)

    def add_message(self, mid: int, role: str, content: str) -> MessageWidget:
        """A new message at the end (a send, a reply starting)."""
        w = self._make_widget(mid, role, content, self._list.count() - 1)
        self._widgets[mid] = w
        self._stick = True
        return w

    def _make_widget(self, mid: int, role: str, content: str, index: int) -> MessageWidget:
        w = MessageWidget(mid, role, content, colors=self.colors)
        w.copy_requested.connect(self._copy)
        w.notify.connect(self.notify)
        w.edit_requested.connect(self.start_edit)
        w.regenerate_requested.connect(self.regenerate_requested)
        w.performance_requested.connect(self.performance_requested)
        w.speak_requested.connect(self.speak_requested)
        w.btn_speak.setVisible(role == "assistant" and self.can_speak)
        w.branch_step.connect(self.branch_requested)
        w.pin_toggled.connect(self.pin_requested)
        self._list.insertWidget(index, w)
        self.empty.hide()
        return w

    def set_branches(self, positions: dict[int, tuple[int, int]]) -> None:
        """Show ``◀ place/count ▶`` on the built messages that have other versions."""
        for mid, w in self._widgets.items():
            w.set_branch(*positions.get(mid, (1, 1)))

    def last_reply(self) -> str | None:
        """The text of the last reply on screen (None: there is none)."""
        for w in reversed(self._widgets.values()):
            if w.role == "assistant":
                return w.text
        return None

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
        self._pending = [m for m in self._pending if m.id < mid]
        self.divider.removed_from(mid)
        self.empty.setVisible(not self._widgets and not self._pending)

    def apply_colors(self, colors: dict[str, str]) -> None:
        self.colors = colors
        for w in self._widgets.values():
            w.apply_colors(colors)
        theme.repolish(self)

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

    def _escaped(self) -> None:
        """Escape cancels an edit; otherwise it stops a reply that is being written."""
        if self._editing is not None:
            self.cancel_edit()
        elif self._busy:
            self.stop_requested.emit()

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

    def _example(self, text: str) -> None:
        """An example prompt was clicked: send it as if typed (if it cannot go, it stays in the box)."""
        self.set_input_text(text)
        self._submit()

    def _copy(self, text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        self.notify.emit("Copied to the clipboard.")

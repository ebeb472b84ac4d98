"""One message in the chat: its text (Markdown for replies), actions and metrics.

A streaming reply shows the stream's own list of deltas (``follow``; the window
keeps it, so the text survives this widget when the user switches chats). It is
rendered at most every RENDER_MS, or less often when a render costs more
(RENDER_SHARE), and a render takes only the deltas that are new
(app.chat.reply_pieces), so its cost does not grow with the reply. A reply's
links and images stay inert (app.ui.safe_links). What a thinking model thought
first is shown apart, in a block above the answer (app.chat.reasoning_block);
Copy, Copy code and Regenerate act on the answer.
"""
from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QMenu, QToolButton, QVBoxLayout, QWidget

from engine import has_timeline

from app.chat.image_strip import ImageStrip, ReadFn
from app.chat.reasoning_block import ReasoningBlock
from app.chat.reply_pieces import SEGMENT_CHARS, ReplyPieces
from app.chat.source_preview import SourcesLine
from app.chat.text_view import AutoHeightBrowser
from app.core.context_meter import context_lines
from app.core.text_utils import code_blocks, finish_note, metrics_line, speculation_lines

RENDER_MS = 40
RENDER_SHARE = 4  # the next render waits at least this many times what the last one cost

__all__ = ["AutoHeightBrowser", "MessageWidget", "RENDER_MS", "RENDER_SHARE", "SEGMENT_CHARS"]


class MessageWidget(QFrame):
    copy_requested = Signal(str)
    notify = Signal(str)                 # a short message for the status bar
    edit_requested = Signal(int)         # message id (user messages)
    regenerate_requested = Signal(int)   # message id (the last reply)
    branch_step = Signal(int, int)       # message id, -1 / +1: show the previous / next version
    performance_requested = Signal(int)  # message id (a reply with a timeline): open its Performance panel
    speak_requested = Signal(int, str)   # message id, text: read this reply aloud (or stop reading it)
    pin_toggled = Signal(int, bool)      # message id, pinned: never left out or summarized for the model

    def __init__(self, mid: int, role: str, content: str, *, colors: dict[str, str],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.mid = mid
        self.role = role
        self._text = content
        self._live: list[str] | None = None  # the stream's deltas, while following one
        self._live_n = 0                     # how many of them ``_text`` holds
        self._shown: list[str] | None = None  # the deltas the view shows ...
        self._shown_n = 0                    # ... and how many of them
        self.render_ms = RENDER_MS           # the wait before the next render
        self.metrics: dict | None = None
        self.streaming = False
        self.reading = False  # the engine is still reading the prompt; no reply text yet
        self.flashed = False
        self.setObjectName("message")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._colors = colors
        self._frame_style()  # before the children: set after them, the sheet is applied to each one again

        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 8)
        lay.setSpacing(4)
        head = QHBoxLayout()
        self.who = QLabel("You" if role == "user" else "Hearth" if role == "assistant" else role.title())
        self.who.setObjectName("who")  # styled by the frame's one style sheet (_frame_style), as the labels below
        head.addWidget(self.who)
        # "◀ 2/3 ▶": this message has other versions (regenerated or edited); all are kept.
        self.btn_prev = self._button("◀", "Show the previous version of this message",
                                     lambda: self.branch_step.emit(self.mid, -1))
        self.branch_label = QLabel()
        self.btn_next = self._button("▶", "Show the next version of this message",
                                     lambda: self.branch_step.emit(self.mid, 1))
        for b in (self.btn_prev, self.branch_label, self.btn_next):
            head.addWidget(b)
        self.set_branch(1, 1)
        head.addStretch(1)
        self.btn_details = self._button("Details", "Show this reply's metrics", self._toggle_details)
        self.btn_details.setCheckable(True)
        self.btn_perf = self._button("Performance", "Where this reply's time went, as charts",
                                     lambda: self.performance_requested.emit(self.mid))
        self.btn_code = self._button("Copy code", "Copy a code block from this message", self._copy_code)
        self.btn_copy = self._button("Copy", "Copy this message as Markdown",
                                     lambda: self.copy_requested.emit(self.text))
        self.btn_edit = self._button("Edit", "Edit this message and resend it (later messages are replaced)",
                                     lambda: self.edit_requested.emit(self.mid))
        self.btn_regen = self._button("Regenerate", "Write this reply again",
                                      lambda: self.regenerate_requested.emit(self.mid))
        self.btn_speak = self._button("Speak", "Read this reply aloud",
                                      lambda: self.speak_requested.emit(self.mid, self.text))
        self.btn_pin = self._button("Pin", "", lambda: self.pin_toggled.emit(self.mid, self.btn_pin.isChecked()))
        self.btn_pin.setCheckable(True)
        self.set_pinned(False)
        for b in (self.btn_pin, self.btn_details, self.btn_perf, self.btn_code, self.btn_copy, self.btn_speak,
                  self.btn_edit, self.btn_regen):
            head.addWidget(b)
        lay.addLayout(head)

        # A reply is shown as a column of pieces (app.chat.reply_pieces): re-parsing the
        # whole Markdown on every render made long replies stall the window (~95 ms at
        # 29 KiB), so a finished piece is rendered once and only the last one again.
        self._colors = colors
        self.thinking = ReasoningBlock(colors, self)  # hidden unless the reply has reasoning
        lay.addWidget(self.thinking)
        self.documents = QLabel()  # a user message's attached documents, one chip line
        self.documents.setTextFormat(Qt.TextFormat.PlainText)
        self.documents.setWordWrap(True)
        self.documents.setObjectName("muted")
        self.documents.hide()
        lay.addWidget(self.documents)
        self.images = ImageStrip()  # a user message's images, as thumbnails
        lay.addWidget(self.images)
        self.pieces = ReplyPieces(colors, self)
        self.pieces.code_copied.connect(self._code_copied)
        self.pieces.link_refused.connect(self.notify)
        lay.addWidget(self.pieces)
        self.tool_cards = QVBoxLayout()  # the reply's tool calls (app.chat.tool_card), in call order
        self.tool_cards.setSpacing(4)
        lay.addLayout(self.tool_cards)
        self.note = QLabel()
        self.note.setTextFormat(Qt.TextFormat.PlainText)  # it names the user's files
        self.note.setWordWrap(True)
        self.note.setObjectName("note")
        self.note.hide()
        lay.addWidget(self.note)
        self.sources = SourcesLine()  # the passages retrieval gave the reply, each a link to its text
        lay.addWidget(self.sources)
        self.details = QLabel()
        self.details.setTextFormat(Qt.TextFormat.PlainText)  # notes may name files: never markup
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setObjectName("details")
        self.details.hide()
        lay.addWidget(self.details)

        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_MS)
        self._render_timer.timeout.connect(self._render)

        self.btn_edit.setVisible(role == "user")
        self.btn_speak.hide()  # shown on replies where voice is installed (ChatView.can_speak)
        self.btn_regen.setVisible(False)
        self.btn_details.setVisible(role == "assistant")
        self.btn_details.setEnabled(False)  # until the reply's metrics exist
        self.btn_perf.setVisible(role == "assistant")
        self.btn_perf.setEnabled(False)  # until the reply's timeline exists
        self._render(rebuild=True)  # the colours are the constructor's: apply_colors is for a theme change

    def _button(self, text: str, tip: str, slot) -> QToolButton:
        b = QToolButton(self)
        b.setText(text)
        b.setToolTip(tip)
        b.setAutoRaise(True)
        b.clicked.connect(slot)
        return b

    def apply_colors(self, colors: dict[str, str]) -> None:
        self._colors = colors
        self._frame_style()
        self.thinking.set_colors(colors)
        self.pieces.set_colors(colors)
        self._render(rebuild=True)

    def _frame_style(self) -> None:
        c = self._colors
        bg = c["user"] if self.role == "user" else c["assistant"]
        border = f"2px solid {c['hit']}" if self.flashed else f"1px solid {c['border']}"
        # One sheet for the frame and its labels: a sheet per label cost a style pass each, on the path from
        # Enter to the first word (bench remote's TTFT).
        self.setStyleSheet(f"QFrame#message {{ background: {bg}; border: {border}; border-radius: 10px; }}"
                           "QLabel#who { font-weight: 600; }"
                           "QLabel#muted { color: palette(placeholder-text); }"
                           "QLabel#note { color: palette(placeholder-text); font-style: italic; }"
                           "QLabel#details { color: palette(placeholder-text); font-size: 11px; }")

    def flash(self, ms: int = 2500) -> None:
        """Outline this message for a moment (a search hit was opened here)."""
        self.flashed = True
        self._frame_style()
        QTimer.singleShot(ms, self._unflash)

    def _unflash(self) -> None:
        self.flashed = False
        self._frame_style()

    # -- content ------------------------------------------------------------

    @property
    def segments(self) -> list[AutoHeightBrowser]:
        """The text views, top to bottom (one for short messages)."""
        return list(self.pieces.segments)

    @property
    def body(self) -> AutoHeightBrowser:
        """The first text segment (the only one for short messages)."""
        return self.pieces.segments[0]

    def rendered_text(self) -> str:
        """What the view shows, as plain text, all segments together."""
        return self.pieces.rendered_text()

    def _render(self, rebuild: bool = False) -> None:
        if self.role != "assistant":
            # What the user typed is shown exactly as typed, not reinterpreted as Markdown.
            self.body.setPlainText(self.text)
            self.btn_code.setVisible(bool(code_blocks(self.text)))
            return
        t0 = time.perf_counter()
        live = self._live
        if (not rebuild and self.streaming and live is not None and live is self._shown
                and self._shown_n <= len(live) and self.pieces.can_append()):
            # The usual case while a reply streams: only the new deltas are read.
            new = "".join(live[self._shown_n:])
            self._shown_n = len(live)
            self.pieces.append(new, streaming=True)
        else:
            self.pieces.show_text(self.text, final=not self.streaming, rebuild=rebuild)
            self._shown, self._shown_n = live, len(live) if live is not None else 0
        self.btn_code.setVisible(self.pieces.has_code() and not self.streaming)
        # A slow machine renders less often rather than spend all its time rendering.
        cost_ms = (time.perf_counter() - t0) * 1000
        self.render_ms = max(RENDER_MS, int(RENDER_SHARE * cost_ms))
        self._render_timer.setInterval(self.render_ms)

    @property
    def text(self) -> str:
        """The message's text; while following a stream, its deltas so far (joined when read)."""
        if self._live is not None and self._live_n != len(self._live):
            self._text, self._live_n = "".join(self._live), len(self._live)
        return self._text

    @text.setter
    def text(self, value: str) -> None:
        self._live = None
        self._text = value

    def follow(self, deltas: list[str]) -> None:
        """Show the reply streaming into ``deltas`` (the window appends to it; no copy here)."""
        self._live, self._live_n = deltas, -1
        self.grew()

    def follow_reasoning(self, deltas: list[str]) -> None:
        """Show the reasoning streaming into ``deltas`` in the block above the answer."""
        self.thinking.follow(deltas)
        if self._live:  # the answer has begun already (the window was showing another chat)
            self.thinking.answer_started()

    def reasoning_grew(self) -> None:
        """The followed reasoning has new text."""
        self.reading = False
        if self._live is None or not self._live:  # no answer yet
            self.note.setText("Thinking…")
        self.thinking.grew()

    def grew(self) -> None:
        """The followed stream has new text: render it soon."""
        self.thinking.answer_started()
        if self._live and self.note.text() == "Thinking…":
            self.note.setText("Writing…")
        if self.reading:
            self.reading = False
            self.note.setText("Writing…")
        if not self._render_timer.isActive():
            self._render_timer.start()

    def set_reading(self, percent: int) -> None:
        """Say in the pending reply how much of a long prompt the model has read."""
        self.reading = True
        self.note.setText(f"Reading the prompt… {percent}%")
        self.note.show()

    def set_streaming(self, on: bool) -> None:
        self.streaming = on
        if on:
            self.btn_details.setEnabled(False)
            self.btn_perf.setEnabled(False)
            self.note.setText("Writing…")
            self.note.show()
        self._render()

    def set_result(self, text: str, *, complete: bool, finish_reason: str | None,
                   error: str | None = None, metrics: dict | None = None, reasoning: str | None = None,
                   reasoning_open: bool = False, reasoning_tokens: int | None = None) -> None:
        """Show a reply's final state (or the state it was left in); its reasoning folded."""
        self._render_timer.stop()
        self.thinking.set_final(reasoning, unfinished=reasoning_open, metrics=metrics, tokens=reasoning_tokens)
        self.streaming = self.reading = False
        self.text = text
        self.metrics = metrics
        # The engine's notes for the user (a thinking budget that closed the reasoning), after the end's.
        said = [str(n)[:1].upper() + str(n)[1:] + "." for n in (metrics or {}).get("notes") or ()]
        note = "\n".join(x for x in (finish_note(complete, finish_reason, error), *said) if x)
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self.sources.set_sources((metrics or {}).get("sources"))
        line = metrics_line(metrics)
        self.details.setText("\n".join([line, *context_lines(metrics), *speculation_lines(metrics)]))
        self.btn_details.setToolTip(line)
        self.btn_details.setEnabled(metrics is not None)
        self.btn_perf.setEnabled(has_timeline(metrics))
        self._render()

    def show_documents(self, parts, read: ReadFn | None = None) -> None:
        """The documents this message carries (DocumentParts): name and pages, as inert text; and its
        images as thumbnails (their bytes from the part, or ``read(sha256)`` from the store)."""
        self.images.show_parts(parts, read)
        docs = [p for p in parts if getattr(p, "kind", "") == "document"]
        self.documents.setText("   ".join(f"📄 {p.name}" + (f" · {p.pages} pages" if p.pages else "") for p in docs))
        self.documents.setVisible(bool(docs))

    def add_tool_card(self, card: QWidget) -> None:
        """A tool call of this reply step, below its text; it takes the place of a card drawn
        earlier for the same call (a live card over the one drawn from the history)."""
        for i, old in enumerate(self.cards()):
            if getattr(old, "call_id", None) == getattr(card, "call_id", None):
                self.tool_cards.removeWidget(old)
                old.deleteLater()
                self.tool_cards.insertWidget(i, card)
                return
        self.tool_cards.addWidget(card)

    def cards(self) -> list:
        """The tool cards of this reply step, in call order."""
        return [self.tool_cards.itemAt(i).widget() for i in range(self.tool_cards.count())]

    def set_branch(self, place: int, count: int) -> None:
        """Show which of ``count`` versions this is (nothing when it is the only one)."""
        many = count > 1
        for b in (self.btn_prev, self.branch_label, self.btn_next):
            b.setVisible(many)
        self.branch_label.setText(f"{place}/{count}")
        self.branch_label.setToolTip(f"Version {place} of {count}: every version is kept")
        self.btn_prev.setEnabled(place > 1)
        self.btn_next.setEnabled(place < count)

    def set_pinned(self, on: bool) -> None:
        """Show whether the message is pinned (the model always sees it, however long the chat grows)."""
        self.btn_pin.setChecked(on)
        self.btn_pin.setText("Pinned" if on else "Pin")
        self.btn_pin.setToolTip("Pinned: the model always sees this message, however long the chat grows. "
                                "Click to unpin." if on else
                                "Pin: the model always sees this message, however long the chat grows (never "
                                "left out or summarized when the chat outgrows the context)")

    def set_speaking(self, on: bool) -> None:
        """This reply is being read aloud: its Speak button stops it."""
        self.btn_speak.setText("Stop speaking" if on else "Speak")

    def set_can_regenerate(self, on: bool) -> None:
        self.btn_regen.setVisible(on)

    def _toggle_details(self, on: bool) -> None:
        self.details.setVisible(on)

    def _code_copied(self, code: str) -> None:
        self.copy_requested.emit(code)

    def _copy_code(self) -> None:
        blocks = code_blocks(self.text)
        if len(blocks) == 1:
            self.copy_requested.emit(blocks[0])
            return
        menu = QMenu(self)
        for i, code in enumerate(blocks, 1):
            first = next((ln for ln in code.splitlines() if ln.strip()), "")[:40]
            act = menu.addAction(f"Block {i}: {first}")
            act.triggered.connect(lambda _=False, c=code: self.copy_requested.emit(c))
        menu.exec(self.btn_code.mapToGlobal(self.btn_code.rect().bottomLeft()))

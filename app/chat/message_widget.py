"""One message in the chat: its text (Markdown for replies), actions and metrics.

A streaming reply shows the stream's own list of deltas (``follow``; the window
keeps it, so the text survives this widget when the user switches chats) and is
re-rendered at most every RENDER_MS, joined only then, because re-parsing
Markdown on every token would stall the event loop on long replies. A reply's
links and images stay inert (app.ui.safe_links).
"""
from __future__ import annotations

import secrets

from PySide6.QtCore import QPoint, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QMenu, QSizePolicy, QTextBrowser,
                               QToolButton, QVBoxLayout, QWidget)

from engine.metrics import has_timeline

from app.chat import markdown_render
from app.ui import safe_links
from app.core.text_utils import code_blocks, finish_note, metrics_line, segment_bounds

RENDER_MS = 40
SEGMENT_CHARS = 1500  # a finished piece of a reply this long is rendered once, then left alone


class AutoHeightBrowser(QTextBrowser):
    """A read-only text view as tall as its document, so the page scrolls, not each message."""

    link_refused = Signal(str)  # why a clicked link was not opened
    code_copied = Signal(str)   # a code block's Copy link was clicked: its code

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWordWrapMode(self.wordWrapMode().WrapAtWordBoundaryOrAnywhere)
        # Clicks only report the link: open_link asks first (a QTextBrowser would
        # otherwise open it, or navigate itself to a local file).
        self.setOpenLinks(False)
        self.anchorClicked.connect(self._open_link)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._menu)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.colors: dict[str, str] = {}
        self.codes: list[str] = []  # each code block's text, for its Copy link
        self._token = secrets.token_hex(8)  # Copy links carry it: a link in the reply cannot pass for one

    def _fit(self, *_args) -> None:
        m = self.contentsMargins()
        h = int(self.document().size().height() + 0.999) + m.top() + m.bottom()
        if h != self.height():
            self.setFixedHeight(max(h, 20))

    def resizeEvent(self, e) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(e)
        self._fit()

    def set_markdown(self, text: str) -> None:
        self.document().setMarkdown(text, safe_links.MARKDOWN)
        safe_links.inert_images(self.document())
        if self.colors:
            self.codes = markdown_render.dress(self.document(), self.colors, self.colors.get("scheme", "light"),
                                               self._token)

    def loadResource(self, kind: int, url: QUrl):  # noqa: N802 (Qt override)
        if safe_links.resource_allowed(url):
            return super().loadResource(kind, url)
        return safe_links.refused_resource(kind)

    def _open_link(self, url: QUrl) -> None:
        if url.scheme() == markdown_render.COPY_SCHEME:
            index = next((i for i in range(len(self.codes))
                          if url.toString() == markdown_render.copy_href(self._token, i)), None)
            if index is not None:
                self.code_copied.emit(self.codes[index])
                return
        refused = safe_links.open_link(self, url)
        if refused:
            self.link_refused.emit(refused)

    def code_at(self, pos: QPoint) -> str | None:
        """The whole code block under ``pos`` (viewport coordinates), or None."""
        block = self.cursorForPosition(pos).block()
        if not markdown_render.is_code(block):
            return None
        first = block
        while first.previous().isValid() and markdown_render.is_code(first.previous()):
            first = first.previous()
        lines, b = [], first
        while b.isValid() and markdown_render.is_code(b):
            lines.append(b.text())
            b = b.next()
        return "\n".join(lines)

    def _menu(self, pos: QPoint) -> None:
        menu = self.createStandardContextMenu(pos)
        code = self.code_at(pos)
        if code is not None:
            act = menu.addAction("Copy code block")
            act.triggered.connect(lambda: QGuiApplication.clipboard().setText(code))
            menu.insertAction(menu.actions()[0], act)
        menu.exec(self.viewport().mapToGlobal(pos))


class MessageWidget(QFrame):
    copy_requested = Signal(str)
    notify = Signal(str)                 # a short message for the status bar
    edit_requested = Signal(int)         # message id (user messages)
    regenerate_requested = Signal(int)   # message id (the last reply)
    branch_step = Signal(int, int)       # message id, -1 / +1: show the previous / next version
    performance_requested = Signal(int)  # message id (a reply with a timeline): open its Performance panel

    def __init__(self, mid: int, role: str, content: str, *, colors: dict[str, str],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.mid = mid
        self.role = role
        self._text = content
        self._live: list[str] | None = None  # the stream's deltas, while following one
        self._live_n = 0                     # how many of them ``_text`` holds
        self.metrics: dict | None = None
        self.streaming = False
        self.reading = False  # the engine is still reading the prompt; no reply text yet
        self.flashed = False
        self.setObjectName("message")
        self.setFrameShape(QFrame.Shape.StyledPanel)

        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 8)
        lay.setSpacing(4)
        head = QHBoxLayout()
        self.who = QLabel("You" if role == "user" else "Hearth" if role == "assistant" else role.title())
        self.who.setStyleSheet("font-weight: 600;")
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
        for b in (self.btn_details, self.btn_perf, self.btn_code, self.btn_copy, self.btn_edit, self.btn_regen):
            head.addWidget(b)
        lay.addLayout(head)

        # A reply is shown as a column of segments (see text_utils.segment_bounds):
        # re-parsing the whole Markdown on every render made long replies stall
        # the window (~95 ms at 29 KiB), so only the last segment is re-rendered.
        self._lay = lay
        self.segments: list[AutoHeightBrowser] = []
        self._starts: list[int] = []
        self._frozen = ""  # the text the frozen segments show
        self._colors = colors
        self._add_segment(0)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: palette(placeholder-text); font-style: italic;")
        self.note.hide()
        lay.addWidget(self.note)
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setStyleSheet("color: palette(placeholder-text); font-size: 11px;")
        self.details.hide()
        lay.addWidget(self.details)

        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_MS)
        self._render_timer.timeout.connect(self._render)

        self.btn_edit.setVisible(role == "user")
        self.btn_regen.setVisible(False)
        self.btn_details.setVisible(role == "assistant")
        self.btn_details.setEnabled(False)  # until the reply's metrics exist
        self.btn_perf.setVisible(role == "assistant")
        self.btn_perf.setEnabled(False)  # until the reply's timeline exists
        self.apply_colors(colors)
        self._render()

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
        for seg in self.segments:
            seg.colors = colors
        self._render(rebuild=True)

    def _frame_style(self) -> None:
        c = self._colors
        bg = c["user"] if self.role == "user" else c["assistant"]
        border = f"2px solid {c['hit']}" if self.flashed else f"1px solid {c['border']}"
        self.setStyleSheet(f"QFrame#message {{ background: {bg}; border: {border}; border-radius: 10px; }}")

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
    def body(self) -> AutoHeightBrowser:
        """The first text segment (the only one for short messages)."""
        return self.segments[0]

    def rendered_text(self) -> str:
        """What the view shows, as plain text, all segments together."""
        return "\n".join(seg.toPlainText() for seg in self.segments)

    def _add_segment(self, start: int) -> AutoHeightBrowser:
        seg = AutoHeightBrowser(self)
        seg.colors = self._colors
        seg.code_copied.connect(self._code_copied)
        seg.link_refused.connect(self.notify)
        self._lay.insertWidget(1 + len(self.segments), seg)  # after the header, before the notes
        self.segments.append(seg)
        self._starts.append(start)
        return seg

    def _render(self, rebuild: bool = False) -> None:
        if self.role != "assistant":
            # What the user typed is shown exactly as typed, not reinterpreted as Markdown.
            self.body.setPlainText(self.text)
            self.btn_code.setVisible(bool(code_blocks(self.text)))
            return
        text = self.text
        if rebuild or not text.startswith(self._frozen):
            for seg in self.segments[1:]:
                self._lay.removeWidget(seg)
                seg.deleteLater()
            del self.segments[1:], self._starts[1:]
        # Frozen segments keep what they show; newly finished pieces are frozen now.
        for cut in segment_bounds(text, self._starts[-1], SEGMENT_CHARS):
            self.segments[-1].set_markdown(text[self._starts[-1]:cut])
            self._add_segment(cut)
        self._frozen = text[:self._starts[-1]]
        live = text[self._starts[-1]:]
        self.segments[-1].set_markdown(live if live or not self.streaming else "…")
        self.btn_code.setVisible(bool(code_blocks(text)) and not self.streaming)

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

    def grew(self) -> None:
        """The followed stream has new text: render it soon."""
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
                   error: str | None = None, metrics: dict | None = None) -> None:
        """Show a reply's final state (or the state it was left in)."""
        self._render_timer.stop()
        self.streaming = self.reading = False
        self.text = text
        self.metrics = metrics
        note = finish_note(complete, finish_reason, error)
        self.note.setText(note)
        self.note.setVisible(bool(note))
        line = metrics_line(metrics)
        self.details.setText(line)
        self.btn_details.setToolTip(line)
        self.btn_details.setEnabled(metrics is not None)
        self.btn_perf.setEnabled(has_timeline(metrics))
        self._render()

    def set_branch(self, place: int, count: int) -> None:
        """Show which of ``count`` versions this is (nothing when it is the only one)."""
        many = count > 1
        for b in (self.btn_prev, self.branch_label, self.btn_next):
            b.setVisible(many)
        self.branch_label.setText(f"{place}/{count}")
        self.branch_label.setToolTip(f"Version {place} of {count}: every version is kept")
        self.btn_prev.setEnabled(place > 1)
        self.btn_next.setEnabled(place < count)

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

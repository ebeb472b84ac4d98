"""A reply's reasoning: a block above the answer that streams what the model thinks, then folds.

While the reasoning streams the block is open and shows it live. It is plain text
in a read-only text view that takes no rich text and is only given plain text, so
nothing in it is a link or markup (model output is inert), and each render only
appends the new deltas: the cost does not grow
with the reasoning. When the answer starts, or the reply ends, the block folds to
one line ("Thought for 12.3 s · 412 tokens"); a click opens and closes it. A
reply loaded from the store shows it folded.
"""
from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QFrame, QTextEdit, QToolButton, QVBoxLayout, QWidget

RENDER_MS = 40          # new reasoning is appended at most this often
OPEN_HEIGHT = 180       # the live block grows up to this tall, then scrolls to its end
EXPANDED_HEIGHT = 360   # an opened folded block, the same


def thought_line(metrics: dict | None, tokens: int | None = None, unfinished: bool = False) -> str:
    """The folded block's line: "Thought for 12.3 s · 412 tokens", or what the figures allow."""
    m = metrics or {}
    ms = m.get("reasoning_ms")
    n = tokens if tokens is not None else m.get("reasoning_tokens")
    head = f"Thought for {ms / 1000:.1f} s" if isinstance(ms, (int, float)) and ms > 0 else "Thought"
    if isinstance(n, int) and n > 0:
        line = f"{head} · {n:,} token{'s' if n != 1 else ''}"
    else:
        line = head if head != "Thought" else "Thoughts"
    return line + (" (unfinished)" if unfinished else "")


class ReasoningBlock(QFrame):
    """The reasoning of one reply (hidden when the reply has none)."""

    def __init__(self, colors: dict[str, str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("reasoning")
        self._live: list[str] | None = None  # the stream's reasoning deltas, while following one
        self._shown_n = 0                    # how many of them the view holds
        self.streaming = False
        self.line = ""                       # the folded line
        self._t0: float | None = None        # when the first reasoning came (the live fold's figure)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 4, 8, 4)
        lay.setSpacing(2)
        self.toggle = QToolButton(self)
        self.toggle.setAutoRaise(True)
        self.toggle.setCheckable(True)
        self.toggle.setToolTip("Show or hide what the model thought before answering")
        self.toggle.toggled.connect(self._toggled)
        lay.addWidget(self.toggle)
        self.view = QTextEdit(self)
        self.view.setReadOnly(True)
        self.view.setAcceptRichText(False)
        self.view.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.view.setFrameShape(QFrame.Shape.NoFrame)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.hide()
        lay.addWidget(self.view)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(RENDER_MS)
        self._timer.timeout.connect(self._append)
        self.set_colors(colors)
        self.hide()

    def set_colors(self, colors: dict[str, str]) -> None:
        self.setStyleSheet(
            f"QFrame#reasoning {{ background: {colors['code']}; border-left: 3px solid {colors['border']}; "
            f"border-radius: 6px; }} QFrame#reasoning QToolButton {{ color: {colors['muted']}; border: none; "
            f"background: transparent; font-style: italic; }} "
            f"QFrame#reasoning QTextEdit {{ background: transparent; color: {colors['muted']}; }}")

    @property
    def text(self) -> str:
        return self.view.toPlainText()

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    # -- streaming ------------------------------------------------------------

    def follow(self, deltas: list[str]) -> None:
        """Show the reasoning streaming into ``deltas`` (the window appends to it)."""
        self._live, self._shown_n = deltas, 0
        self.view.clear()
        self.streaming = True
        self.hide()  # (a partial reply drawn from the store showed its reasoning folded): open again
        if deltas:
            self.grew()

    def grew(self) -> None:
        """The followed reasoning has new text: open the block and append it soon."""
        if not self.streaming:
            return
        if self._t0 is None:
            self._t0 = time.perf_counter()
        if self.isHidden():
            self.show()
            self.toggle.setText("▾ Thinking…")
            self._set_open(True)
        if not self._timer.isActive():
            self._timer.start()

    def _append(self) -> None:
        live = self._live
        if live is None or self._shown_n >= len(live):
            return
        new = "".join(live[self._shown_n:])
        self._shown_n = len(live)
        cur = self.view.textCursor()
        cur.movePosition(QTextCursor.MoveOperation.End)
        cur.insertText(new)  # plain text, appended: the earlier reasoning is not laid out again
        self._fit()
        if self.streaming:
            bar = self.view.verticalScrollBar()
            bar.setValue(bar.maximum())

    def answer_started(self) -> None:
        """The answer began: fold the block (its figures come with the reply's end)."""
        if not self.streaming or self.isHidden():
            return
        self._append()
        self.streaming = False
        secs = time.perf_counter() - self._t0 if self._t0 is not None else 0.0
        self.line = thought_line({"reasoning_ms": secs * 1000})
        self._set_open(False)

    # -- final ----------------------------------------------------------------

    def set_final(self, reasoning: str | None, *, unfinished: bool = False, metrics: dict | None = None,
                  tokens: int | None = None) -> None:
        """The reply's reasoning as it ended (None: it had none), folded to its line."""
        self._timer.stop()
        self.streaming = False
        self._live = None
        if not reasoning:
            self.view.clear()
            self.hide()
            return
        if self.view.toPlainText() != reasoning:
            self.view.setPlainText(reasoning)
            self._fit()
        self.line = thought_line(metrics, tokens, unfinished)
        self.show()
        self._set_open(False)

    def _set_open(self, on: bool) -> None:
        self.toggle.blockSignals(True)
        self.toggle.setChecked(on)
        self.toggle.blockSignals(False)
        self._toggled(on)

    def _fit(self) -> None:
        """As tall as the reasoning, up to OPEN_HEIGHT while it streams (EXPANDED_HEIGHT after)."""
        doc = self.view.document()
        if self.view.width() > 0:
            doc.setTextWidth(self.view.viewport().width())
        cap = OPEN_HEIGHT if self.streaming else EXPANDED_HEIGHT
        self.view.setFixedHeight(min(cap, int(doc.size().height()) + 2 * self.view.frameWidth() + 2))

    def resizeEvent(self, e) -> None:  # noqa: N802 (Qt override): a new width wraps the text anew
        super().resizeEvent(e)
        if self.view.isVisible():
            self._fit()

    def _toggled(self, on: bool) -> None:
        self.view.setVisible(on)
        if on:
            self._fit()
        if not self.streaming:
            self.toggle.setText(("▾ " if on else "▸ ") + self.line)

"""Where the model's view of a conversation begins, in the chat: a divider above the first message
it still reads, and the summary it reads instead of the messages above (app/core/context_meter.py
says where). Both follow the messages as they are built: a divider above a message not built yet
is placed when that message is."""
from __future__ import annotations

from typing import Mapping

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.chat.summary_block import SummaryBlock
from app.core.context_meter import Divider


class ContextDivider:
    """The divider label and the summary block in one chat's list of messages."""

    def __init__(self, lay: QVBoxLayout, parent: QWidget) -> None:
        self._lay = lay
        self.label = QLabel(parent)
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.label.setWordWrap(True)
        self.label.setStyleSheet("color: palette(placeholder-text); font-style: italic;")
        self.label.hide()
        self.block = SummaryBlock(parent)
        self.block.hide()
        self.wanted: Divider | None = None  # what should show, placed or not
        self.placed: int | None = None      # the message it sits above, once placed

    def set(self, divider: Divider | None, widgets: Mapping[int, QWidget]) -> None:
        """Show ``divider`` above its message (None: nothing)."""
        self.wanted = divider
        self._place(widgets)

    def built(self, widgets: Mapping[int, QWidget]) -> None:
        """Messages were built: place a divider that waited for its message."""
        if self.wanted is not None and self.placed is None:
            self._place(widgets)

    def removed_from(self, mid: int) -> None:
        """Messages from ``mid`` on left the view."""
        if self.placed is not None and self.placed >= mid:
            self.set(None, {})

    def _place(self, widgets: Mapping[int, QWidget]) -> None:
        for w in (self.label, self.block):
            self._lay.removeWidget(w)
            w.hide()
        d = self.wanted
        target = widgets.get(d.before) if d is not None else None
        self.placed = d.before if d is not None and target is not None else None
        if d is None or target is None:
            return
        self.label.setText(d.text)
        self.label.setToolTip(d.tip)
        self._lay.insertWidget(self._lay.indexOf(target), self.label)
        self.label.show()
        if d.summary is not None:
            self.block.show_summary(d.summary)
            self._lay.insertWidget(self._lay.indexOf(target), self.block)
            self.block.show()

"""A status-bar label whose text is parts joined by " · ", cut between parts when it is narrow.

A plain QLabel in a crowded status bar is clipped wherever the pixels run out, mid-word
("draft acceptance ("). This one shows as many whole parts as fit, then "…", and its
tooltip says the whole line; it never asks the status bar for more than its first part.
"""
from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QLabel, QWidget

SEP = " · "
MORE = " …"


class PartLabel(QLabel):
    """``setText`` takes the whole line; what is shown is its longest prefix of whole parts that fits."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self._tip = ""
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self._full = text
        self._fit()

    def text(self) -> str:
        """The whole line, as set (``shown_text`` is what fits)."""
        return self._full

    def setToolTip(self, tip: str) -> None:  # noqa: N802 (Qt's name)
        self._tip = tip
        self._fit()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        fm = self.fontMetrics()
        hint = super().sizeHint()
        return QSize(fm.horizontalAdvance(self._full) + 2 * self.margin() + 4, hint.height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        fm = self.fontMetrics()
        first = self._full.split(SEP, 1)[0]
        hint = super().minimumSizeHint()
        return QSize(fm.horizontalAdvance(first + MORE) + 2 * self.margin() + 4, hint.height())

    def resizeEvent(self, e) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(e)
        self._fit()

    def shown_text(self) -> str:
        """What the label shows now (whole parts, and "…" when some are left out)."""
        return super().text()

    def _fit(self) -> None:
        room = self.contentsRect().width() - 2 * self.margin()
        shown = fit_parts(self._full, room, self.fontMetrics().horizontalAdvance)
        super().setText(shown)
        cut = shown != self._full
        tip = "\n".join(t for t in (self._full if cut else "", self._tip) if t)
        super().setToolTip(tip)


def fit_parts(text: str, room: int, width) -> str:
    """The longest prefix of ``text``'s " · " parts that fits in ``room`` pixels (``width`` measures a
    string), with " …" when parts are left out; the first part always stays."""
    if width(text) <= room:
        return text
    parts = text.split(SEP)
    for n in range(len(parts) - 1, 0, -1):
        shown = SEP.join(parts[:n]) + MORE
        if width(shown) <= room:
            return shown
    return parts[0] + (MORE if len(parts) > 1 else "")

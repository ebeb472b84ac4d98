"""Dialogs that fit a laptop's screen: a 1366x768 display has about 1366x728 for windows once a taskbar takes
its share, and a dialog's tab taller than that is cut off, its buttons out of reach. So each tab scrolls
where it must, and a dialog is never made larger than the screen it opens on."""
from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget

MARGIN = 40  # pixels left around a dialog for the window frame and a taskbar


def scrolled(page: QWidget) -> QScrollArea:
    """``page`` in a scroll area that shows a vertical bar only when the page is taller than the room."""
    area = QScrollArea()
    area.setWidget(page)
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
    return area


def fit_screen(dialog: QWidget, pages: Sequence[QWidget] = ()) -> None:
    """Size ``dialog`` to what its ``pages`` (the scrolled tabs' contents) want, but never past the available
    part of its screen: a page taller than the room scrolls."""
    screen = dialog.screen() or QGuiApplication.primaryScreen()
    if screen is None:
        return
    room = screen.availableGeometry()
    want = dialog.sizeHint()
    if pages:  # a scroll area asks for little: the pages say what they need, plus the dialog's own frame
        want.setWidth(max(want.width(), max(p.sizeHint().width() for p in pages) + 2 * MARGIN))
        want.setHeight(max(want.height(), max(p.sizeHint().height() for p in pages) + 3 * MARGIN))
    width = min(max(want.width(), dialog.minimumWidth()), room.width() - MARGIN)
    height = min(want.height(), room.height() - MARGIN)
    dialog.setMaximumSize(room.width(), room.height())
    dialog.resize(width, height)

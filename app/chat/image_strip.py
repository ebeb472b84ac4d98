"""Images as thumbnails: in the message box before sending and in the history, a click for full size.

A thumbnail is drawn from the image's bytes by Qt's own decoder, after engine.images
checked them (the tray only holds images that passed; the history's come from the store,
which they entered the same way). Nothing here fetches anything.
"""
from __future__ import annotations

from typing import Callable, Sequence

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QIcon, QPixmap
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QScrollArea, QToolButton, QVBoxLayout, QWidget

THUMB = 72

ReadFn = Callable[[str], bytes]


def pixmap(data: bytes) -> QPixmap:
    pm = QPixmap()
    pm.loadFromData(data)
    return pm


def thumbnail(data: bytes, tip: str, parent: QWidget | None = None) -> QToolButton:
    """A button showing the image small; clicking it opens the image at full size."""
    b = QToolButton(parent)
    pm = pixmap(data)
    b.setIcon(QIcon(pm.scaled(THUMB, THUMB, Qt.AspectRatioMode.KeepAspectRatio,
                              Qt.TransformationMode.SmoothTransformation)))
    b.setIconSize(QSize(THUMB, THUMB))
    b.setToolTip(f"{tip} ({pm.width()} × {pm.height()}). Click for full size.")
    b.setAccessibleName(tip)
    b.clicked.connect(lambda: show_full(data, tip, b))
    return b


def show_full(data: bytes, title: str, parent: QWidget | None = None) -> QDialog:
    """The image at its own size (scrolling when larger than the screen), in a dialog."""
    d = QDialog(parent)
    d.setWindowTitle(title)
    lay = QVBoxLayout(d)
    area = QScrollArea()
    label = QLabel()
    label.setPixmap(pixmap(data))
    area.setWidget(label)
    area.setWidgetResizable(False)
    lay.addWidget(area)
    pm = label.pixmap()
    screen = d.screen().availableGeometry() if d.screen() is not None else None
    w, h = pm.width() + 40, pm.height() + 40
    if screen is not None:
        w, h = min(w, int(screen.width() * 0.9)), min(h, int(screen.height() * 0.9))
    d.resize(max(w, 200), max(h, 150))
    d.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    d.show()
    return d


class ImageStrip(QWidget):
    """A message's images, in order, as thumbnails (hidden when it has none)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(4)
        self.shown: list[str] = []  # the images' hashes, in order
        self.hide()

    def show_parts(self, parts: Sequence[object], read: ReadFn | None) -> None:
        while self.row.count():
            w = self.row.takeAt(0).widget()
            if w is not None:
                w.deleteLater()
        self.shown = []
        for p in parts:
            if getattr(p, "kind", "") != "image":
                continue
            sha = getattr(p, "sha256")
            data = getattr(p, "data", None)
            try:
                data = data if data is not None else read(sha) if read is not None else None
            except Exception:  # a file gone from the data folder: its place says so, the rest shows
                data = None
            if data is None:
                missing = QLabel(f"[image {sha[:12]} is missing]")
                self.row.addWidget(missing)
            else:
                self.row.addWidget(thumbnail(data, f"Image {len(self.shown) + 1}"))
            self.shown.append(sha)
        self.row.addStretch(1)
        self.setVisible(bool(self.shown))

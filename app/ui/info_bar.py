"""Non-modal notices at the top of the window: errors, recoveries, 'Deleted — Undo'.

Dialogs would block the event loop and the tests; a stack of closable bars
keeps every message visible until the user dismisses it (or it times out, for
the purely informational ones).

A bar may carry tags, so that one event gives one bar and a bar that is no longer
true goes: "model" on what a load said (its notes, a machine lost under it), which
the next load dismisses; ``reply:<id>`` on what a reply's failure said, so the most
specific word on it (shown first) is the only one.
"""
from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget

STYLES = {
    "info": "background: palette(alternate-base); border: 1px solid palette(mid);",
    "error": "background: rgba(217, 72, 15, 0.14); border: 1px solid #d9480f;",
}
MAX_BARS = 4


class InfoBar(QFrame):
    def __init__(self, text: str, kind: str, parent: QWidget | None = None, tags: tuple[str, ...] = ()) -> None:
        super().__init__(parent)
        self.kind = kind
        self.tags = tags
        self.setObjectName("infobar")
        self.setStyleSheet(f"QFrame#infobar {{ {STYLES[kind]} border-radius: 6px; }}")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 6, 6, 6)
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(self.label.textInteractionFlags().TextSelectableByMouse)
        lay.addWidget(self.label, 1)
        self.action_button: QPushButton | None = None
        close = QToolButton()
        close.setText("✕")
        close.setToolTip("Dismiss")
        close.setAutoRaise(True)
        close.clicked.connect(self.dismiss)
        self._close = close
        lay.addWidget(close)

    def add_action(self, label: str, fn: Callable[[], None]) -> None:
        b = QPushButton(label)
        b.clicked.connect(fn)
        b.clicked.connect(self.dismiss)
        self.layout().insertWidget(1, b)
        self.action_button = b

    def text(self) -> str:
        return self.label.text()

    def dismiss(self) -> None:
        self.hide()
        self.deleteLater()


class InfoArea(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._lay = QVBoxLayout(self)
        self._lay.setContentsMargins(8, 4, 8, 0)
        self._lay.setSpacing(4)
        self._bars: list[InfoBar] = []

    def show_message(self, text: str, kind: str = "info", *, action: tuple[str, Callable[[], None]] | None = None,
                     timeout_ms: int | None = None, tags: tuple[str, ...] = ()) -> InfoBar:
        """Show a notice; errors stay until dismissed, info may time out. ``tags``: see the module's docstring."""
        self._bars = [b for b in self._bars if not b.isHidden()]
        while len(self._bars) >= MAX_BARS:
            self._bars.pop(0).dismiss()
        bar = InfoBar(text, kind, self, tags)
        if action is not None:
            bar.add_action(*action)
        self._lay.addWidget(bar)
        bar.show()  # a layout shows new children only on the next event-loop pass
        self._bars.append(bar)
        bar.destroyed.connect(lambda *_: self._forget(bar))
        if timeout_ms:
            QTimer.singleShot(timeout_ms, bar, bar.dismiss)
        return bar

    def _forget(self, bar: InfoBar) -> None:
        if bar in self._bars:
            self._bars.remove(bar)

    def messages(self) -> list[str]:
        """The texts of the notices currently shown (newest last)."""
        out = []
        for b in self._bars:
            try:
                if not b.isHidden():
                    out.append(b.text())
            except RuntimeError:  # already deleted on the C++ side
                pass
        return out

    def bars(self) -> list[InfoBar]:
        return [b for b in self._bars if not b.isHidden()]

    def shown(self, tag: str) -> bool:
        """Whether a bar with ``tag`` is showing."""
        return any(tag in b.tags for b in self.bars())

    def dismiss(self, tag: str) -> None:
        """Take away every bar with ``tag`` (what it said is no longer true)."""
        for b in self.bars():
            if tag in b.tags:
                b.dismiss()

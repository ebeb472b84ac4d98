"""A question before something that cannot be undone (deleting a model from disk)."""
from __future__ import annotations

from typing import Callable

from PySide6.QtWidgets import QMessageBox, QWidget


def ask_to_delete(parent: QWidget, title: str, text: str, answered: Callable[[bool], None]) -> QMessageBox:
    """Ask Yes or Cancel (Cancel the default, so Enter deletes nothing), without blocking the window;
    ``answered(yes)`` once the user has answered. The box is returned, for the caller to keep."""
    box = QMessageBox(QMessageBox.Icon.Warning, title, text,
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, parent)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.finished.connect(lambda code: answered(code == QMessageBox.StandardButton.Yes))
    box.open()
    return box

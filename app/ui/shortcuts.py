"""Every keyboard shortcut, in one table: the bindings and the Help → Shortcuts sheet both
come from it, so the sheet cannot drift from what the keys do.

``where`` says where a key works: "window" anywhere in the main window, "chat"
while the focus is in the chat (so Esc in a dialog or an editor elsewhere keeps
its own meaning), "list" in the conversation list (so Delete in the search box
deletes text, not a chat), "input" in the input box (bound by InputBox itself,
which asks ``matches``), "held" while held down (app/voice watches it, where
voice is installed). The first key of each entry is the one the sheet shows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QHeaderView, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)


@dataclass(slots=True, frozen=True)
class Shortcut:
    name: str
    keys: tuple[str, ...]
    what: str
    where: str = "window"


SHORTCUTS: tuple[Shortcut, ...] = (
    Shortcut("new", ("Ctrl+N",), "Start a new chat"),
    Shortcut("search", ("Ctrl+F",), "Search chats: titles and the text of every message"),
    Shortcut("next_chat", ("Ctrl+Tab",), "Go to the next chat in the list"),
    Shortcut("prev_chat", ("Ctrl+Shift+Tab", "Ctrl+Shift+Backtab"), "Go to the previous chat in the list"),
    Shortcut("escape", ("Esc",), "Stop the reply being written (while editing a message: cancel the edit)",
             "chat"),
    Shortcut("stop", ("Ctrl+.",), "Stop the reply being written"),
    Shortcut("edit_last", ("Up",), "In the empty input box: edit your last message", "input"),
    Shortcut("regenerate", ("Ctrl+R",), "Write the last reply again (the old one is kept as a version)"),
    Shortcut("copy_last", ("Ctrl+Shift+C",), "Copy the last reply"),
    Shortcut("zoom_in", ("Ctrl++", "Ctrl+="), "Make the chat text bigger"),
    Shortcut("zoom_out", ("Ctrl+-",), "Make the chat text smaller"),
    Shortcut("zoom_reset", ("Ctrl+0",), "Chat text at its normal size"),
    Shortcut("rename", ("F2",), "Rename the selected chat"),
    Shortcut("delete", ("Del",), "In the chat list: delete the selected chat (Undo brings it back)", "list"),
    Shortcut("library", ("Ctrl+Shift+M",), "Open the model library (the Models dock)"),
    Shortcut("settings", ("Ctrl+,",), "Open Settings"),
    Shortcut("shortcuts", ("F1",), "Show this list of shortcuts"),
    Shortcut("talk", ("F8",), "Hold to dictate into the message box (where voice is installed)", "held"),
    Shortcut("quit", ("Ctrl+Q",), "Quit Hearth"),
)
BY_NAME = {s.name: s for s in SHORTCUTS}


def keys(name: str) -> list[QKeySequence]:
    """The key sequences of shortcut ``name``, for QAction.setShortcuts."""
    return [QKeySequence(k) for k in BY_NAME[name].keys]


def matches(name: str, e: QKeyEvent) -> bool:
    """Whether a key press is shortcut ``name`` (for keys a widget handles itself)."""
    pressed = QKeySequence(e.keyCombination())
    return any(pressed.matches(k) == QKeySequence.SequenceMatch.ExactMatch for k in keys(name))


def bind(owner: QWidget, name: str, slot: Callable[[], None], *, on: QWidget | None = None) -> QAction:
    """A QAction for shortcut ``name`` on widget ``on`` (default: ``owner``), in its table context."""
    s = BY_NAME[name]
    act = QAction(s.what, owner)
    act.setShortcuts(keys(name))
    act.setObjectName(f"shortcut_{name}")
    act.setShortcutContext(Qt.ShortcutContext.WindowShortcut if s.where == "window"
                           else Qt.ShortcutContext.WidgetWithChildrenShortcut)
    act.triggered.connect(slot)
    (on or owner).addAction(act)
    return act


def shown_keys(s: Shortcut) -> str:
    """The entry's first key as this platform writes it (e.g. Ctrl+Shift+C, ⌘⇧C)."""
    return QKeySequence(s.keys[0]).toString(QKeySequence.SequenceFormat.NativeText)


class ShortcutsSheet(QDialog):
    """Help → Shortcuts: the table above, as the user reads it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        lay = QVBoxLayout(self)
        self.table = QTableWidget(len(SHORTCUTS), 2)
        self.table.setHorizontalHeaderLabels(["Keys", "What they do"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        for row, s in enumerate(SHORTCUTS):
            self.table.setItem(row, 0, QTableWidgetItem(shown_keys(s)))
            self.table.setItem(row, 1, QTableWidgetItem(s.what))
        head = self.table.horizontalHeader()
        head.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        head.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        lay.addWidget(self.table)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.resize(620, 520)

    def rows(self) -> list[tuple[str, str]]:
        return [(self.table.item(r, 0).text(), self.table.item(r, 1).text()) for r in range(self.table.rowCount())]

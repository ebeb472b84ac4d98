"""The left-hand panel: search, the conversations, and new / rename / delete."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QHBoxLayout, QLineEdit, QListWidget, QListWidgetItem, QPushButton,
                               QVBoxLayout, QWidget)

from .store import Conversation

ID_ROLE = Qt.ItemDataRole.UserRole


class ConversationList(QWidget):
    selected = Signal(int)
    new_requested = Signal()
    renamed = Signal(int, str)
    delete_requested = Signal(int)
    search_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 0, 8)
        self.new_button = QPushButton("+ New chat")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        lay.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search titles")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.search_changed)
        lay.addWidget(self.search)
        self.list = QListWidget()
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)  # long titles end in "…"; full title in the tooltip
        self.list.setEditTriggers(QListWidget.EditTrigger.EditKeyPressed
                                  | QListWidget.EditTrigger.DoubleClicked)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemChanged.connect(self._item_changed)
        lay.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.rename_button = QPushButton("Rename")
        self.rename_button.setToolTip("Rename the selected conversation (F2 or double-click)")
        self.rename_button.clicked.connect(self.begin_rename)
        self.delete_button = QPushButton("Delete")
        self.delete_button.setToolTip("Delete the selected conversation (you can undo)")
        self.delete_button.clicked.connect(self._delete)
        row.addWidget(self.rename_button)
        row.addWidget(self.delete_button)
        lay.addLayout(row)
        self._filling = False

    def populate(self, conversations: list[Conversation], current: int | None) -> None:
        """Show ``conversations``, keeping ``current`` selected if it is among them."""
        self._filling = True
        self.list.clear()
        for c in conversations:
            item = QListWidgetItem(c.title)
            item.setData(ID_ROLE, c.id)
            item.setToolTip(c.title)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if c.id == current:
                self.list.setCurrentItem(item)
        self._filling = False
        has = self.current_id() is not None
        self.rename_button.setEnabled(has)
        self.delete_button.setEnabled(has)

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return None if item is None else int(item.data(ID_ROLE))

    def ids(self) -> list[int]:
        return [int(self.list.item(i).data(ID_ROLE)) for i in range(self.list.count())]

    def titles(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]

    def begin_rename(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.list.editItem(item)

    def _current_changed(self, item: QListWidgetItem | None, _prev) -> None:
        if not self._filling and item is not None:
            self.selected.emit(int(item.data(ID_ROLE)))
        has = item is not None
        self.rename_button.setEnabled(has)
        self.delete_button.setEnabled(has)

    def _item_changed(self, item: QListWidgetItem) -> None:
        if not self._filling:
            self.renamed.emit(int(item.data(ID_ROLE)), item.text())

    def _delete(self) -> None:
        cid = self.current_id()
        if cid is not None:
            self.delete_requested.emit(cid)

"""The left-hand panel: search (titles and message text), the conversations (pinned
first), and new / rename / pin / delete."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QLabel, QLineEdit, QListWidget, QListWidgetItem,
                               QPushButton, QVBoxLayout, QWidget)

from app.core.chat_search import SearchHit, snippet_html
from app.core.store import Conversation

ID_ROLE = Qt.ItemDataRole.UserRole
MID_ROLE = Qt.ItemDataRole.UserRole + 1
PIN_MARK = "📌"


class ConversationList(QWidget):
    selected = Signal(int)
    new_requested = Signal()
    renamed = Signal(int, str)
    delete_requested = Signal(int)
    search_changed = Signal(str)
    hit_chosen = Signal(int, int)   # conversation id, message id
    pin_requested = Signal(int)     # toggle

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 0, 8)
        self.new_button = QPushButton("+ New chat")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        lay.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats (Ctrl+F)")
        self.search.setToolTip("Finds conversation titles and words in any message")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.search_changed)
        lay.addWidget(self.search)
        self.search_reasoning = QCheckBox("Include reasoning")
        self.search_reasoning.setToolTip("Also find words in what thinking models thought before they answered")
        self.search_reasoning.toggled.connect(lambda _on: self.search_changed.emit(self.search.text()))
        lay.addWidget(self.search_reasoning)
        self.list = QListWidget()
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)  # long titles end in "…"; full title in the tooltip
        self.list.setEditTriggers(QListWidget.EditTrigger.EditKeyPressed
                                  | QListWidget.EditTrigger.DoubleClicked)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemChanged.connect(self._item_changed)
        lay.addWidget(self.list, 2)
        self.hits_label = QLabel("In messages")
        self.hits_label.setStyleSheet("color: palette(placeholder-text);")
        self.hits = QListWidget()
        self.hits.setWordWrap(True)
        self.hits.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.hits.itemActivated.connect(self._hit_activated)
        self.hits.itemClicked.connect(self._hit_activated)
        lay.addWidget(self.hits_label)
        lay.addWidget(self.hits, 3)
        self.show_hits([])
        row = QHBoxLayout()
        self.rename_button = QPushButton("Rename")
        self.rename_button.setToolTip("Rename the selected conversation (F2 or double-click)")
        self.rename_button.clicked.connect(self.begin_rename)
        self.delete_button = QPushButton("Delete")
        self.delete_button.setToolTip("Delete the selected conversation (you can undo)")
        self.delete_button.clicked.connect(self._delete)
        self.pin_button = QPushButton("Pin")
        self.pin_button.setToolTip("Keep the selected conversation at the top of the list")
        self.pin_button.clicked.connect(self._pin)
        row.addWidget(self.rename_button)
        row.addWidget(self.pin_button)
        row.addWidget(self.delete_button)
        lay.addLayout(row)
        self._filling = False
        self._pinned: set[int] = set()

    def populate(self, conversations: list[Conversation], current: int | None) -> None:
        """Show ``conversations``, keeping ``current`` selected if it is among them."""
        self._filling = True
        self.list.clear()
        self._pinned = {c.id for c in conversations if c.pinned}
        for c in conversations:
            item = QListWidgetItem(c.title)
            item.setData(ID_ROLE, c.id)
            item.setToolTip(f"{PIN_MARK} Pinned: {c.title}" if c.pinned else c.title)
            if c.pinned:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if c.id == current:
                self.list.setCurrentItem(item)
        self._filling = False
        self._sync_buttons()

    def show_hits(self, hits: list[SearchHit]) -> None:
        """List the messages that match the search, hits in bold (the text is escaped)."""
        self.hits.clear()
        for h in hits:
            item = QListWidgetItem()
            item.setData(ID_ROLE, h.conversation_id)
            item.setData(MID_ROLE, h.message_id)
            who = "You" if h.role == "user" else "Hearth" if h.role == "assistant" else h.role.title()
            where = " · in its reasoning" if h.in_reasoning else ""
            label = QLabel(f"<b>{snippet_html(h.title)}</b> · {who}{where}<br>{snippet_html(h.snippet)}")
            label.setTextFormat(Qt.TextFormat.RichText)
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
            label.setContentsMargins(4, 2, 4, 2)
            self.hits.addItem(item)
            self.hits.setItemWidget(item, label)
            item.setSizeHint(label.sizeHint())
        shown = bool(self.search.text().strip())
        self.hits_label.setText(f"In messages: {len(hits)}" + ("" if hits else " (none)"))
        self.hits_label.setVisible(shown)
        self.hits.setVisible(shown and bool(hits))

    def hit_widgets(self) -> list[QLabel]:
        return [self.hits.itemWidget(self.hits.item(i)) for i in range(self.hits.count())]

    def _hit_activated(self, item: QListWidgetItem) -> None:
        self.hit_chosen.emit(int(item.data(ID_ROLE)), int(item.data(MID_ROLE)))

    def _sync_buttons(self) -> None:
        cid = self.current_id()
        for b in (self.rename_button, self.delete_button, self.pin_button):
            b.setEnabled(cid is not None)
        self.pin_button.setText("Unpin" if cid in self._pinned else "Pin")

    def _pin(self) -> None:
        cid = self.current_id()
        if cid is not None:
            self.pin_requested.emit(cid)

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
        self._sync_buttons()

    def _item_changed(self, item: QListWidgetItem) -> None:
        if not self._filling:
            self.renamed.emit(int(item.data(ID_ROLE)), item.text())

    def _delete(self) -> None:
        cid = self.current_id()
        if cid is not None:
            self.delete_requested.emit(cid)

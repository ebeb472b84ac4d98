"""The window's keyboard shortcuts that are not menu items, text size, and Help → Shortcuts.

``KeyboardController`` is one of MainWindow's controllers. The keys come from
app/ui/shortcuts.py (one table for the bindings and the sheet); the menu items' keys
are read from the same table. What a key does elsewhere (search, copy, delete a
conversation) is passed in as callbacks.
"""
from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QFont, QKeyEvent, QKeySequence
from PySide6.QtWidgets import QApplication, QMainWindow, QStatusBar

from app.chat.chat_view import ChatView
from app.chat.conversation_list import ConversationList
from app.ui import shortcuts
from app.ui.shortcuts import bind

ZOOM_MIN, ZOOM_MAX = -4, 12  # points around the application's font size
WINDOW_WIDE = (Qt.ShortcutContext.WindowShortcut, Qt.ShortcutContext.ApplicationShortcut)


class EarlyKeys(QObject):
    """The window's keys work from the moment it is shown, not only once it was clicked.

    Qt runs a window's shortcuts only while the window system calls it the active
    window. That comes later than show(): through the event loop, and on desktops
    that do not activate new windows (X11 without a window manager, focus-stealing
    prevention) only after a click; until then a window-wide key reached the window
    and did nothing. So the window asks to be activated when it is first shown (with
    the input box focused), and a key that reaches it while it is not active yet
    does what its shortcut says (and activates it)."""

    def __init__(self, window: QMainWindow, focus: Callable[[], None]) -> None:
        super().__init__(window)
        self.window, self._focus, self._shown = window, focus, False
        window.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt override)
        if obj is not self.window:
            return False
        kind = event.type()
        if kind == QEvent.Type.Show and not self._shown:
            self._shown = True
            self.window.activateWindow()
            self._focus()
        elif kind == QEvent.Type.KeyPress and not self.window.isActiveWindow():
            act = self.action_for(event)
            if act is not None:
                self.window.activateWindow()
                act.trigger()
                return True
        return False

    def action_for(self, event: QKeyEvent) -> QAction | None:
        """The enabled window-wide action whose shortcut is this key, if any."""
        pressed = QKeySequence(event.keyCombination())
        for act in self.window.findChildren(QAction):
            if act.isEnabled() and act.shortcutContext() in WINDOW_WIDE and any(
                    pressed.matches(k) == QKeySequence.SequenceMatch.ExactMatch for k in act.shortcuts()):
                return act
        return None


class KeyboardController:
    """Binds the table's window keys on ``window`` and does what they ask.

    ``current`` / ``select_conversation`` / ``delete_conversation`` are the window's
    conversation handling; ``streaming`` says whether a reply is being written, ``stop``
    stops it."""

    def __init__(self, *, window: QMainWindow, chat: ChatView, conversations: ConversationList,
                 status_bar: QStatusBar, current: Callable[[], int | None],
                 select_conversation: Callable[[int], None], delete_conversation: Callable[[int], None],
                 streaming: Callable[[], bool], stop: Callable[[], None], focus_search: Callable[[], None],
                 copy_last_reply: Callable[[], None]) -> None:
        self.window, self.chat, self.conversations, self.status_bar = window, chat, conversations, status_bar
        self._current, self._select, self._delete = current, select_conversation, delete_conversation
        self._streaming, self._stop = streaming, stop
        self.zoom_level = 0  # points added to the application's font size in the chat
        self.shortcuts_sheet: shortcuts.ShortcutsSheet | None = None
        self.key_actions: dict[str, QAction] = {
            "search": bind(window, "search", focus_search),
            "next_chat": bind(window, "next_chat", lambda: self.step_chat(1)),
            "prev_chat": bind(window, "prev_chat", lambda: self.step_chat(-1)),
            "escape": bind(window, "escape", self.escape, on=chat),
            "copy_last": bind(window, "copy_last", copy_last_reply),
            "zoom_in": bind(window, "zoom_in", lambda: self.zoom(1)),
            "zoom_out": bind(window, "zoom_out", lambda: self.zoom(-1)),
            "zoom_reset": bind(window, "zoom_reset", lambda: self.zoom(-self.zoom_level)),
            "delete": bind(window, "delete", self._delete_selected, on=conversations.list),
        }
        chat.edit_last_requested.connect(self.edit_last)
        self.act_shortcuts: QAction | None = None
        self.early_keys = EarlyKeys(window, lambda: chat.input.setFocus())

    def build_help_menu(self) -> None:
        """Help → Keyboard shortcuts (F1): the sheet built from the same table."""
        help_menu = self.window.menuBar().addMenu("&Help")
        self.act_shortcuts = bind(self.window, "shortcuts", self.show_shortcuts)
        self.act_shortcuts.setText("&Keyboard shortcuts")
        help_menu.addAction(self.act_shortcuts)

    def escape(self) -> None:
        """Esc in the chat: cancel an edit in progress, else stop the reply being written."""
        if self.chat.editing is not None:
            self.chat.cancel_edit()
        elif self._streaming():
            self._stop()

    def edit_last(self) -> None:
        """Up in the empty input box: edit the last message the user wrote."""
        mine = [w for w in self.chat.message_widgets() if w.role == "user"]
        if mine and not self._streaming():
            self.chat.start_edit(mine[-1].mid)

    def step_chat(self, step: int) -> None:
        """Ctrl+Tab / Ctrl+Shift+Tab: the next or previous conversation in the list, round."""
        ids = self.conversations.ids()
        if not ids:
            return
        current = self._current()
        here = ids.index(current) if current in ids else -1
        self._select(ids[(here + step) % len(ids)])

    def zoom(self, step: int) -> None:
        """Make the chat's text bigger or smaller by ``step`` points (within limits)."""
        self.zoom_level = max(ZOOM_MIN, min(ZOOM_MAX, self.zoom_level + step))
        base = QApplication.font().pointSizeF()
        font = QFont(self.chat.font())
        font.setPointSizeF(base + self.zoom_level)
        self.chat.setFont(font)
        self.status_bar.showMessage(f"Text size {font.pointSizeF():g} pt", 2000)

    def _delete_selected(self) -> None:
        cid = self.conversations.current_id()
        if cid is not None:
            self._delete(cid)

    def show_shortcuts(self) -> shortcuts.ShortcutsSheet:
        """Show the shortcuts sheet (not modal) and return it."""
        sheet = shortcuts.ShortcutsSheet(self.window)
        sheet.setModal(False)
        sheet.show()
        self.shortcuts_sheet = sheet
        return sheet

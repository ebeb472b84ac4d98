"""The window's keyboard shortcuts that are not menu items, and Help → Shortcuts.

A mixin of MainWindow. The keys come from app/ui/shortcuts.py (one table for the
bindings and the sheet); the menu items' keys are read from the same table.
"""
from __future__ import annotations

from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication

from app.ui import shortcuts
from app.ui.shortcuts import bind

ZOOM_MIN, ZOOM_MAX = -4, 12  # points around the application's font size


class KeyboardMixin:
    def _install_shortcuts(self) -> None:
        self._zoom = 0
        self.key_actions = {
            "search": bind(self, "search", self.focus_search),
            "next_chat": bind(self, "next_chat", lambda: self.step_chat(1)),
            "prev_chat": bind(self, "prev_chat", lambda: self.step_chat(-1)),
            "escape": bind(self, "escape", self.escape, on=self.chat),
            "copy_last": bind(self, "copy_last", self.copy_last_reply),
            "zoom_in": bind(self, "zoom_in", lambda: self.zoom(1)),
            "zoom_out": bind(self, "zoom_out", lambda: self.zoom(-1)),
            "zoom_reset": bind(self, "zoom_reset", lambda: self.zoom(-self._zoom)),
            "delete": bind(self, "delete", self._delete_selected, on=self.conversations.list),
        }
        self.chat.edit_last_requested.connect(self.edit_last)

    def _build_help_menu(self) -> None:
        """Help → Keyboard shortcuts (F1): the sheet built from the same table."""
        help_menu = self.menuBar().addMenu("&Help")
        self.act_shortcuts = bind(self, "shortcuts", self.show_shortcuts)
        self.act_shortcuts.setText("&Keyboard shortcuts")
        help_menu.addAction(self.act_shortcuts)

    def escape(self) -> None:
        """Esc in the chat: cancel an edit in progress, else stop the reply being written."""
        if self.chat.editing is not None:
            self.chat.cancel_edit()
        elif self.stream is not None:
            self.stop()

    def edit_last(self) -> None:
        """Up in the empty input box: edit the last message the user wrote."""
        mine = [w for w in self.chat.message_widgets() if w.role == "user"]
        if mine and self.stream is None:
            self.chat.start_edit(mine[-1].mid)

    def step_chat(self, step: int) -> None:
        """Ctrl+Tab / Ctrl+Shift+Tab: the next or previous conversation in the list, round."""
        ids = self.conversations.ids()
        if not ids:
            return
        here = ids.index(self.current) if self.current in ids else -1
        self.select_conversation(ids[(here + step) % len(ids)])

    def zoom(self, step: int) -> None:
        """Make the chat's text bigger or smaller by ``step`` points (within limits)."""
        self._zoom = max(ZOOM_MIN, min(ZOOM_MAX, self._zoom + step))
        base = QApplication.font().pointSizeF()
        font = QFont(self.chat.font())
        font.setPointSizeF(base + self._zoom)
        self.chat.setFont(font)
        self.statusBar().showMessage(f"Text size {font.pointSizeF():g} pt", 2000)

    def _delete_selected(self) -> None:
        cid = self.conversations.current_id()
        if cid is not None:
            self.delete_conversation(cid)

    def show_shortcuts(self) -> shortcuts.ShortcutsSheet:
        sheet = shortcuts.ShortcutsSheet(self)
        sheet.setModal(False)
        sheet.show()
        self.shortcuts_sheet = sheet
        return sheet

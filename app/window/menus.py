"""The File and Chat menus: each action, its keys (app/ui/shortcuts.py's table) and what it calls."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu, QWidget

from app.ui.shortcuts import keys

if TYPE_CHECKING:
    from app.window.main_window import MainWindow


def add_action(menu: QMenu, owner: QWidget, text: str, shortcut, slot) -> QAction:
    """An action in ``menu`` with its shortcut(s), calling ``slot``."""
    act = QAction(text, owner)
    act.setShortcuts(shortcut if isinstance(shortcut, list) else [shortcut])
    act.triggered.connect(slot)
    menu.addAction(act)
    return act


def build_file_and_chat_menus(w: "MainWindow") -> None:
    """File (new, settings, import/export, quit) and Chat (stop, regenerate, rename); the window
    keeps the actions other parts look up (``act_new``, ``act_settings``, ``act_stop``, ``act_regen``)."""
    menu = w.menuBar()
    file_menu = menu.addMenu("&File")
    w.act_new = add_action(file_menu, w, "&New chat", keys("new"), w.new_conversation)
    w.act_settings = add_action(file_menu, w, "&Settings…", keys("settings"), w.open_settings)
    nav = w.navigation
    add_action(file_menu, w, "&Import conversation…", QKeySequence(), nav.ask_import)
    add_action(file_menu, w, "Export as &Markdown…", QKeySequence(), lambda: nav.ask_export("markdown"))
    add_action(file_menu, w, "Export as &JSON…", QKeySequence(), lambda: nav.ask_export("json"))
    file_menu.addSeparator()
    add_action(file_menu, w, "&Quit", keys("quit"), w.close)
    chat_menu = menu.addMenu("&Chat")
    w.act_stop = add_action(chat_menu, w, "&Stop reply", keys("stop"), w.stop)
    w.act_regen = add_action(chat_menu, w, "&Regenerate last reply", keys("regenerate"), w.replies.regenerate_last)
    add_action(chat_menu, w, "Re&name conversation", keys("rename"), w.conversations.begin_rename)
    add_action(chat_menu, w, "This chat's &settings…", QKeySequence(),
               lambda: w.replies.reply_settings.edit_chat_settings(w))

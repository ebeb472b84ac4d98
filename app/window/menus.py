"""The File and Chat menus: each action, its keys (app/ui/shortcuts.py's table) and what it calls.

The menus are given what each action calls (:class:`MenuSlots`), not the window: they know no more
of it than their actions need."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu, QMenuBar, QWidget

from app.ui.shortcuts import keys


def add_action(menu: QMenu, owner: QWidget, text: str, shortcut, slot) -> QAction:
    """An action in ``menu`` with its shortcut(s), calling ``slot``."""
    act = QAction(text, owner)
    act.setShortcuts(shortcut if isinstance(shortcut, list) else [shortcut])
    act.triggered.connect(slot)
    menu.addAction(act)
    return act


@dataclass(frozen=True, slots=True)
class MenuSlots:
    """What the File and Chat menus' actions call."""
    new_chat: Callable[[], object]
    settings: Callable[[], object]
    import_chat: Callable[[], object]
    export_chat: Callable[[str], object]   # "markdown" or "json"
    quit: Callable[[], object]
    stop: Callable[[], object]
    regenerate: Callable[[], object]
    rename: Callable[[], object]
    chat_settings: Callable[[], object]


@dataclass(frozen=True, slots=True)
class MenuActions:
    """The actions other parts of the window look up."""
    new: QAction
    settings: QAction
    stop: QAction
    regenerate: QAction


def build_file_and_chat_menus(bar: QMenuBar, owner: QWidget, slots: MenuSlots) -> MenuActions:
    """File (new, settings, import/export, quit) and Chat (stop, regenerate, rename, this chat's settings)."""
    file_menu = bar.addMenu("&File")
    new = add_action(file_menu, owner, "&New chat", keys("new"), slots.new_chat)
    settings = add_action(file_menu, owner, "&Settings…", keys("settings"), slots.settings)
    add_action(file_menu, owner, "&Import conversation…", QKeySequence(), slots.import_chat)
    add_action(file_menu, owner, "Export as &Markdown…", QKeySequence(), lambda: slots.export_chat("markdown"))
    add_action(file_menu, owner, "Export as &JSON…", QKeySequence(), lambda: slots.export_chat("json"))
    file_menu.addSeparator()
    add_action(file_menu, owner, "&Quit", keys("quit"), slots.quit)
    chat_menu = bar.addMenu("&Chat")
    stop = add_action(chat_menu, owner, "&Stop reply", keys("stop"), slots.stop)
    regen = add_action(chat_menu, owner, "&Regenerate last reply", keys("regenerate"), slots.regenerate)
    add_action(chat_menu, owner, "Re&name conversation", keys("rename"), slots.rename)
    add_action(chat_menu, owner, "This chat's &settings…", QKeySequence(), slots.chat_settings)
    return MenuActions(new, settings, stop, regen)

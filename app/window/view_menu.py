"""View menu: the theme (System / Light / Dark, saved in the settings) and text size.

``ViewMenu`` is one of MainWindow's controllers. The zoom actions are the keyboard
table's own (app/window/keyboard.py), shown here too so they can be found with the mouse.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMainWindow

from app.core.settings import THEMES, Settings
from app.ui import theme

THEME_LABELS = {"system": "&System", "light": "&Light", "dark": "&Dark"}


class ViewMenu:
    """Adds View → Theme and the text-size actions to ``window``'s menu bar.

    ``settings`` reads the window's settings, ``adopt_settings`` replaces and saves them,
    ``apply_theme`` re-themes the window from them."""

    def __init__(self, *, window: QMainWindow, zoom_actions: list[QAction], settings: Callable[[], Settings],
                 adopt_settings: Callable[[Settings], None], apply_theme: Callable[[], None]) -> None:
        self.window = window
        self._settings, self._adopt, self._apply_theme = settings, adopt_settings, apply_theme
        view = window.menuBar().addMenu("&View")
        themes = view.addMenu("&Theme")
        group = QActionGroup(window)
        group.setExclusive(True)
        self.theme_actions: dict[str, QAction] = {}
        for choice in THEMES:
            act = QAction(THEME_LABELS.get(choice, choice.title()), window)
            act.setCheckable(True)
            act.setChecked(choice == settings().theme)
            act.triggered.connect(lambda _=False, c=choice: self.set_theme(c))
            group.addAction(act)
            themes.addAction(act)
            self.theme_actions[choice] = act
        view.addSeparator()
        for act in zoom_actions:
            view.addAction(act)

    def set_theme(self, choice: str) -> None:
        """Use and save a theme choice ('system' follows the desktop's light or dark)."""
        if choice not in THEMES:
            raise ValueError(f"unknown theme {choice!r}")
        self._adopt(dataclasses.replace(self._settings(), theme=choice))
        self._apply_theme()
        theme.repolish(self.window)  # the list and the status bar too, not only the chat
        self.theme_actions[choice].setChecked(True)

"""View menu: the theme (System / Light / Dark, saved in the settings) and text size.

A mixin of MainWindow. The zoom actions are the keyboard table's own
(app/window/keyboard.py), shown here too so they can be found with the mouse.
"""
from __future__ import annotations

import dataclasses

from PySide6.QtGui import QAction, QActionGroup

from app.ui import theme
from app.core.settings import THEMES

THEME_LABELS = {"system": "&System", "light": "&Light", "dark": "&Dark"}


class ViewMenuMixin:
    def _build_view_menu(self) -> None:
        view = self.menuBar().addMenu("&View")
        themes = view.addMenu("&Theme")
        group = QActionGroup(self)
        group.setExclusive(True)
        self.theme_actions: dict[str, QAction] = {}
        for choice in THEMES:
            act = QAction(THEME_LABELS.get(choice, choice.title()), self)
            act.setCheckable(True)
            act.setChecked(choice == self.settings.theme)
            act.triggered.connect(lambda _=False, c=choice: self.set_theme(c))
            group.addAction(act)
            themes.addAction(act)
            self.theme_actions[choice] = act
        view.addSeparator()
        for name in ("zoom_in", "zoom_out", "zoom_reset"):
            view.addAction(self.key_actions[name])

    def set_theme(self, choice: str) -> None:
        """Use and save a theme choice ('system' follows the desktop's light or dark)."""
        if choice not in THEMES:
            raise ValueError(f"unknown theme {choice!r}")
        self.settings = dataclasses.replace(self.settings, theme=choice)
        self.save_settings()
        self.apply_theme()
        theme.repolish(self)  # the list and the status bar too, not only the chat
        self.theme_actions[choice].setChecked(True)

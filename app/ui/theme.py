"""Light and dark themes and the app icon.

"system" follows QStyleHints.colorScheme() where the platform reports it (and
keeps following it when it changes); where it reports Unknown we use light.
The Fusion style is used everywhere so both palettes look the same on every OS.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication, QWidget

ASSETS = Path(__file__).resolve().parents[2] / "assets"
ICON_PATH = ASSETS / "hearth.svg"

_LIGHT = {
    "window": "#f6f5f3", "base": "#ffffff", "alt": "#efede9", "text": "#1f1d1a",
    "button": "#ebe8e3", "highlight": "#d9480f", "hl_text": "#ffffff", "muted": "#6f6a63",
    "link": "#c2410c", "tooltip": "#fffdf8",
}
_DARK = {
    "window": "#1e1d22", "base": "#26252b", "alt": "#2d2c33", "text": "#ecebe8",
    "button": "#34333a", "highlight": "#f08c4a", "hl_text": "#1e1d22", "muted": "#a19d97",
    "link": "#ffa94d", "tooltip": "#34333a",
}
# Colours the chat view uses for message bubbles and code blocks, per scheme.
BUBBLES = {
    "light": {"user": "#fff1e6", "assistant": "#ffffff", "code": "#f1efeb", "border": "#e2ded8",
              "hit": "#d9480f", "muted": "#6f6a63", "link": "#c2410c", "scheme": "light"},
    "dark": {"user": "#3a2f2a", "assistant": "#26252b", "code": "#1a191e", "border": "#3d3b44",
             "hit": "#f08c4a", "muted": "#a19d97", "link": "#ffa94d", "scheme": "dark"},
}


def app_icon() -> QIcon:
    return QIcon(str(ICON_PATH))


def attach_icon() -> QIcon:
    """The paperclip of the attach button: a drawing that ships with the app, so no emoji font is needed."""
    return QIcon(str(ASSETS / "attach.svg"))


def microphone_icon() -> QIcon:
    """The dictation button's microphone (app/voice): a drawing that ships with the app, as the paperclip."""
    return QIcon(str(ASSETS / "microphone.svg"))


def system_scheme() -> str:
    hints = QGuiApplication.styleHints()
    return "dark" if hints.colorScheme() == Qt.ColorScheme.Dark else "light"


def resolve(choice: str) -> str:
    """'system' | 'light' | 'dark' -> 'light' | 'dark'."""
    return system_scheme() if choice == "system" else choice


def _palette(c: dict[str, str]) -> QPalette:
    p = QPalette()
    R = QPalette.ColorRole
    for role, key in ((R.Window, "window"), (R.Base, "base"), (R.AlternateBase, "alt"),
                      (R.Text, "text"), (R.WindowText, "text"), (R.ButtonText, "text"),
                      (R.Button, "button"), (R.Highlight, "highlight"),
                      (R.HighlightedText, "hl_text"), (R.Link, "link"), (R.ToolTipBase, "tooltip"),
                      (R.ToolTipText, "text"), (R.PlaceholderText, "muted"), (R.BrightText, "link")):
        p.setColor(role, QColor(c[key]))
    for role in (R.Text, R.WindowText, R.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(c["muted"]))
    return p


def repolish(root: QWidget) -> None:
    """Re-read the style sheets under ``root``: a widget with its own style sheet keeps
    the palette it was polished with (the chat's title stayed dark on the dark theme)."""
    for w in [root, *root.findChildren(QWidget)]:
        sheet = w.styleSheet()
        if sheet:
            w.setStyleSheet("")
            w.setStyleSheet(sheet)


def apply(app: QApplication, choice: str) -> str:
    """Apply a theme choice; returns the scheme actually used ('light' or 'dark')."""
    scheme = resolve(choice)
    app.setStyle("Fusion")
    app.setPalette(_palette(_DARK if scheme == "dark" else _LIGHT))
    return scheme

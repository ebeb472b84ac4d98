"""Light and dark themes: View → Theme (System / Light / Dark), saved in the settings file,
applied to the window's palette, the message bubbles and the code colours."""
from __future__ import annotations

import pytest
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

from app.window.main_window import MainWindow
from app.core.settings import SettingsFile
from app.ui.theme import BUBBLES


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    return tmp_path


def test_view_theme_switches_saves_and_comes_back_after_a_restart(qtbot, data_dir):
    w = MainWindow()
    w.show()
    cid = w.current
    mid = w.store.add_message(cid, "assistant", "```python\ndef f():\n    return 1\n```\n")
    w.current = None
    w.select_conversation(cid)
    assert set(w.theme_actions) == {"system", "light", "dark"}
    w.theme_actions["light"].trigger()
    light_window = QApplication.palette().color(QPalette.ColorRole.Window).name()
    light_code = w.chat.widget(mid).body.document().toHtml()
    w.theme_actions["dark"].trigger()
    assert w.scheme == "dark" and w.chat.colors == BUBBLES["dark"]
    assert w.theme_actions["dark"].isChecked() and not w.theme_actions["light"].isChecked()
    dark_window = QApplication.palette().color(QPalette.ColorRole.Window)
    assert dark_window.name() != light_window and dark_window.lightness() < 80
    assert w.chat.widget(mid).body.document().toHtml() != light_code  # the code is recoloured
    title = w.chat.title.palette().color(QPalette.ColorRole.WindowText)
    assert title.lightness() > 150  # styled labels re-read the palette: light text on dark
    saved, _ = SettingsFile().load()
    assert saved.theme == "dark"
    w.close()

    again = MainWindow()  # the choice is read back at start
    assert again.scheme == "dark" and again.theme_actions["dark"].isChecked()
    again.theme_actions["system"].trigger()
    assert SettingsFile().load()[0].theme == "system" and again.scheme in ("light", "dark")
    with pytest.raises(ValueError):
        again.set_theme("purple")
    again.close()

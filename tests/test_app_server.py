"""The local server in the app: its settings, Settings → Local server, the status bar,
and API clients beside the window's own reply (pytest-qt, the real bundled model)."""
from __future__ import annotations

import json

import pytest

from app.settings import Settings, SettingsError, SettingsFile


def test_server_settings_default_off_validate_and_round_trip(tmp_path):
    s = Settings()
    assert (s.server_enabled, s.server_port, s.server_api_key, s.server_cors) == (False, 8765, "", [])
    for bad, field in ((dict(server_port=80), "server_port"), (dict(server_port="8765"), "server_port"),
                       (dict(server_enabled="yes"), "server_enabled"), (dict(server_api_key="a b"), "server_api_key"),
                       (dict(server_cors=["evil.example"]), "server_cors")):
        with pytest.raises(SettingsError, match=field):
            Settings(**bad).validate()
    f = SettingsFile(tmp_path / "settings.json")
    mine = Settings(server_enabled=True, server_port=9123, server_api_key="abc-DEF_123",
                    server_cors=["http://localhost:3000"])
    f.save(mine)
    assert f.load() == (mine, None)
    # A bad server field goes back to its default; the rest are kept.
    raw = json.loads(f.path.read_text())
    raw["server_port"] = 99999
    f.path.write_text(json.dumps(raw))
    loaded, msg = f.load()
    assert loaded.server_port == 8765 and loaded.server_enabled and loaded.server_api_key == "abc-DEF_123"
    assert "server_port" in msg


def test_settings_dialog_local_server_tab(qtbot):
    from PySide6.QtGui import QGuiApplication

    from app.settings_dialog import SettingsDialog

    dlg = SettingsDialog(Settings())
    qtbot.addWidget(dlg)
    tab = dlg.server_tab
    assert not tab.enabled.isChecked() and not tab.port.isEnabled()  # off by default
    assert dlg.build().server_enabled is False
    tab.enabled.setChecked(True)
    tab.port.setValue(9345)
    first = tab.key.text()
    assert len(first) >= 40 and tab.require_key.isChecked()  # a first set-up starts with a generated key
    tab.regenerate.click()
    assert tab.key.text() != first
    tab.copy_key.click()
    assert QGuiApplication.clipboard().text() == tab.key.text()
    assert "127.0.0.1:9345/v1" in tab.example.text() and tab.key.text() in tab.example.text()
    tab.cors.setPlainText("http://localhost:3000/\n\n")
    s = dlg.build()
    assert (s.server_enabled, s.server_port, s.server_api_key, s.server_cors) == (
        True, 9345, tab.key.text(), ["http://localhost:3000"])
    tab.require_key.setChecked(False)
    assert dlg.build().server_api_key == "" and not tab.key.isEnabled()
    tab.cors.setPlainText("not an origin")
    with pytest.raises(SettingsError, match="server_cors"):
        dlg.build()
    # Settings saved with a key show that key again, checked.
    again = SettingsDialog(Settings(server_enabled=True, server_api_key="k-123"))
    qtbot.addWidget(again)
    assert again.server_tab.key.text() == "k-123" and again.server_tab.require_key.isChecked()

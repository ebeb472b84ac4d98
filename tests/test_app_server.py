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

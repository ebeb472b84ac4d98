"""The servers the window remembers, and their keys: stored apart, the keys never in the connections file."""
from __future__ import annotations

import os
import stat

import pytest

from app.core.connections import Connection, Connections
from app.core.settings import Settings, SettingsError
from engine.sizing.load_spec import LoadSpec, remote_model, split_remote


def test_a_connection_and_its_key_are_kept_apart_and_forgotten_together(tmp_path):
    conns = Connections(tmp_path, use_keyring=False)
    saved = conns.save(Connection("192.168.1.20:8765", "desktop", (("qwen", 32768),)), "hearth-secret")
    assert saved.url == "http://192.168.1.20:8765/v1" and saved.has_key
    assert "hearth-secret" not in conns.path.read_text()
    assert conns.key(saved.url) == "hearth-secret"
    for p in (conns.path, conns.keys.path):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    assert conns.all() == [saved] and saved.model_strings() == ["http://192.168.1.20:8765/v1#qwen"]
    conns.remove(saved.url)
    assert conns.all() == [] and conns.key(saved.url) is None


def test_a_damaged_connections_file_is_said_and_nothing_breaks(tmp_path):
    conns = Connections(tmp_path, use_keyring=False)
    conns.folder.mkdir(parents=True)
    conns.path.write_text("{not json")
    assert conns.all() == [] and "could not be read" in conns.notice


def test_a_remote_model_is_a_load_request_and_a_setting():
    model = remote_model("https://gpu.lan:8765/v1", "qwen2.5-32b")
    req = LoadSpec(model=model)
    assert req.model_source == "remote" and req.effective_backend == "remote" and req.plan_format is None
    assert req.title == "qwen2.5-32b on gpu.lan:8765"
    assert split_remote(model) == ("https://gpu.lan:8765/v1", "qwen2.5-32b")
    s = Settings(model=model).validate()
    assert s.source == "remote" and s.load_spec() == req
    with pytest.raises(SettingsError, match="model: "):
        Settings(model="http://bad host:x/v1#m").validate()

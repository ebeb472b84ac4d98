"""Settings keep a load as the engine's LoadSpec holds it: AUTO, written "auto" in settings.json (version 5),
and a file of version 4, which wrote Auto as null, loads unchanged in meaning."""
from __future__ import annotations

import json

from engine.sizing.load_spec import AUTO, LoadSpec

from app.core.settings import FORMAT_VERSION, Settings, SettingsFile

# A settings.json as version 4 wrote it (its load part and last_working, verbatim in shape).
VERSION_4 = {
    "version": 4, "model": "bundled", "source": "bundled", "backend": "auto", "quant": "auto", "context": None,
    "draft": "auto", "mmproj": "auto", "n_threads": 3, "threads_poll": None, "gpu_layers": None,
    "kv_type": "auto", "exactness": "fast", "workers": [], "theme": "dark", "tuning": {}, "tuning_by_path": {},
    "last_working": {"model": "bundled", "source": "bundled", "backend": "auto", "quant": "auto",
                     "context": 2048, "draft": "auto", "mmproj": "auto", "n_threads": None, "threads_poll": None,
                     "gpu_layers": "all", "kv_type": "auto", "exactness": "fast", "workers": []},
}


def test_auto_round_trips_through_the_settings_file(tmp_path):
    path = tmp_path / "settings.json"
    f = SettingsFile(path)
    s = Settings(n_threads=2)
    f.mark_working(s)
    raw = json.loads(path.read_text())
    assert raw["version"] == FORMAT_VERSION == 5
    assert raw["context"] == raw["gpu_layers"] == raw["threads_poll"] == raw["kv_type"] == "auto"
    assert raw["last_working"]["context"] == "auto" and raw["last_working"]["n_threads"] == 2
    again, notice = SettingsFile(path).load()
    assert notice is None and again == s
    assert all(getattr(again, k) is AUTO for k in ("context", "gpu_layers", "threads_poll", "kv_type", "backend"))
    spec = again.load_spec()
    assert spec == LoadSpec(n_threads=2, exactness=s.exactness) and spec.context is AUTO


def test_a_version_4_settings_file_loads_unchanged(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(VERSION_4))
    f = SettingsFile(path)
    s, notice = f.load()
    assert notice is None  # nothing went back to a default, nothing was moved aside
    assert (s.context, s.gpu_layers, s.threads_poll, s.n_threads, s.theme) == (AUTO, AUTO, AUTO, 3, "dark")
    assert s.load_spec() == LoadSpec(n_threads=3, exactness="fast")
    assert f.last_working == LoadSpec(context=2048, gpu_layers="all", exactness="fast")
    assert not list(tmp_path.glob("*.invalid-*"))
    f.save(s)  # written again as version 5: the same settings
    raw = json.loads(path.read_text())
    assert raw["version"] == 5 and raw["context"] == "auto" and raw["last_working"]["gpu_layers"] == "all"
    assert SettingsFile(path).load()[0] == s

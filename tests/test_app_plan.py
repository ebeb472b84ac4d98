"""The window carries out the memory plan: Auto settings come from engine.sizing, fixed
ones stay as chosen.
"""
from __future__ import annotations

import pytest

from app.settings import Settings, SettingsError, SettingsFile


# -- settings and the plan's arguments (no window) ---------------------------------------

def test_gpu_layers_and_kv_type_are_settings_with_clear_errors(tmp_path):
    f = SettingsFile(tmp_path / "settings.json")
    s = Settings(gpu_layers=12, kv_type="q8_0")
    f.save(s)
    again, notice = SettingsFile(tmp_path / "settings.json").load()
    assert notice is None and (again.gpu_layers, again.kv_type) == (12, "q8_0")
    assert Settings(gpu_layers="all").validate().load_key()["gpu_layers"] == "all"
    assert Settings().load_key()["gpu_layers"] is None and Settings().load_key()["kv_type"] == "auto"
    for bad, field in (({"gpu_layers": -1}, "gpu_layers"), ({"gpu_layers": "most"}, "gpu_layers"),
                       ({"gpu_layers": True}, "gpu_layers"), ({"kv_type": "q5_1"}, "kv_type")):
        with pytest.raises(SettingsError, match=f"^{field}"):
            Settings.from_dict({**Settings().to_dict(), **bad})
    with pytest.raises(SettingsError, match="^kv_type: .*GGUF"):
        Settings(model=str(tmp_path), source="hf_dir", kv_type="q8_0").validate()
    # a rollback target saved before these settings existed means Auto for both
    back = Settings().with_load_key({"model": "bundled", "context": 1024})
    assert (back.gpu_layers, back.kv_type, back.context) == (None, "auto", 1024)

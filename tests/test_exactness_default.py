"""The default exactness profile is "fast" (llama.cpp's own kernels), everywhere a load is made
when it names none; HEARTH_EXACTNESS changes it; a settings file that saved the old default
moves to the new one, a profile the user applied stays; a reply says which profile wrote it.

(conftest.py pins HEARTH_EXACTNESS=exact for the rest of the suite; these tests unset it.)"""
from __future__ import annotations

import json

import pytest

from engine import HearthError
from engine.config import EngineConfig, default_exactness


@pytest.fixture
def unpinned(monkeypatch):
    monkeypatch.delenv("HEARTH_EXACTNESS", raising=False)


def test_every_load_path_defaults_to_fast(unpinned, bundled_path):
    from app.core.settings import Settings
    from engine.sizing.load_plan import carry_out, plan_spec
    from engine.sizing.load_spec import LoadSpec
    from engine.sizing.hardware import simulated

    assert default_exactness() == "fast"
    assert EngineConfig(bundled_path).exactness == "fast"
    assert LoadSpec().exactness == "fast" and Settings().exactness == "fast"
    assert Settings().load_spec().exactness == "fast"
    req = LoadSpec()
    plan = plan_spec(req, simulated(gpu="none", ram="16GiB"))
    assert carry_out(plan, req, req.model_ref(), "llama_cpp", n_threads=2, data_dir=None).exactness == "fast"
    # A choice is kept as made.
    assert EngineConfig(bundled_path, exactness="exact").exactness == "exact"


def test_the_environment_changes_the_default_and_a_bad_value_says_so(monkeypatch, bundled_path):
    monkeypatch.setenv("HEARTH_EXACTNESS", "exact")
    assert EngineConfig(bundled_path).exactness == "exact"
    monkeypatch.setenv("HEARTH_EXACTNESS", "fastest")
    with pytest.raises(HearthError, match="HEARTH_EXACTNESS='fastest'.*exact or fast"):
        EngineConfig(bundled_path)


def _saved(path, **fields) -> None:
    path.write_text(json.dumps(fields), encoding="utf-8")


def test_a_settings_file_that_saved_the_old_default_moves_to_the_new_one(unpinned, tmp_path):
    from app.core.settings import FORMAT_VERSION, SettingsFile

    f = SettingsFile(tmp_path / "settings.json")
    # Version 1 saved every field: "exact" there was the default of the day.
    _saved(f.path, version=1, exactness="exact", theme="dark")
    s, msg = f.load()
    assert (s.exactness, s.theme, msg) == ("fast", "dark", None)
    # ... unless "Apply best" chose it for a model: then the user chose it.
    applied = {"m.gguf": {"applied": {"exactness": "exact"}, "previous": {"exactness": "fast"}}}
    _saved(f.path, version=1, exactness="exact", tuning=applied)
    assert f.load()[0].exactness == "exact"
    # A file written since keeps what it says; saving writes the new version.
    _saved(f.path, version=FORMAT_VERSION, exactness="exact")
    s, _ = f.load()
    assert s.exactness == "exact"
    f.save(s)
    assert json.loads(f.path.read_text())["version"] == FORMAT_VERSION


def test_a_reply_says_which_profile_wrote_it(unpinned, bundled_path):
    from app.core.text_utils import metrics_line
    from engine.engine import Engine
    from engine.prompt.messages import Message
    from engine.types import SamplingParams

    for asked, profile in ((None, "fast"), ("exact", "exact")):
        kw = {} if asked is None else {"exactness": asked}
        e = Engine.open(EngineConfig(bundled_path, n_ctx=512, cache_budget=0, **kw))
        try:
            b = e.backend
            assert b.exactness == profile and e.backend.describe().exactness == profile
            # fast: llama.cpp's repack buffers and flash attention, as llama.cpp runs by default
            assert (b.repack, b.flash_attn) == ((True, True) if profile == "fast" else (False, False))
            final = [ev for ev in e.stream([Message("user", "Say hi.")], SamplingParams(temperature=0.0,
                                                                                          max_tokens=4))
                     if ev.kind == "final"][0]
        finally:
            e.close()
        assert final.stats.profile == profile
        line = metrics_line(final.stats.as_dict())
        assert f"llama_cpp, {profile} profile" in line


def test_the_window_loads_the_default_profile_and_a_reply_s_details_name_it(unpinned, make_window):
    from app.window.model_loading import FAST_NOTE
    from app.window.selftest import send_and_wait

    w = make_window()
    assert w.settings.exactness == "fast" and w.host.model.local.exactness == "fast"
    assert w.model_label.text().endswith("fast kernels") and FAST_NOTE in w.model_label.toolTip()
    assert FAST_NOTE not in w.info.messages()  # the default is said in Settings, not at every start
    reply = send_and_wait(w, "Say hello.")
    assert reply["text"] and reply["metrics"]["profile"] == "fast", reply
    widget = next(x for x in w.chat.message_widgets() if x.mid == reply["id"])
    assert "llama_cpp, fast profile" in widget.details.text()


@pytest.mark.parametrize("flag, profile", [((), "fast"), (("--exactness", "exact"), "exact")])
def test_the_command_line_loads_the_default_or_the_profile_asked_for(flag, profile, tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "HEARTH_EXACTNESS"}
    env["HEARTH_DATA_DIR"] = str(tmp_path)
    p = subprocess.run([sys.executable, "-m", "engine", "chat", "--ctx", "512", *flag], input="/quit\n",
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"context 512, {profile} kernels." in p.stderr

"""app/core/settings.py and the small Qt-free helpers the window uses."""
from __future__ import annotations

import json

import pytest

from engine.loading.estimate import auto_context, quick_estimate
from engine.sizing.load_spec import AUTO
from app.core.settings import FORMAT_VERSION, Settings, SettingsError, SettingsFile
from app.core.text_utils import code_blocks, finish_note, human_bytes, metrics_line


def test_defaults_validate_and_round_trip(tmp_path):
    f = SettingsFile(tmp_path / "settings.json")
    s, notice = f.load()
    assert notice is None and s == Settings()
    s.sampling["temperature"] = 0.0
    s.context = 2048
    f.save(s)
    again, notice = SettingsFile(tmp_path / "settings.json").load()
    assert notice is None and again == s
    assert again.sampling_params().greedy
    assert not list(tmp_path.glob(".settings.json.*"))  # no temp files left behind


@pytest.mark.parametrize("change, field", [
    ({"context": 10}, "context"),
    ({"context": "big"}, "context"),
    ({"theme": "neon"}, "theme"),
    ({"draft": "maybe"}, "draft"),
    ({"sampling": {"temperature": -1}}, "sampling"),
    ({"sampling": {"top_p": 0}}, "sampling"),
    ({"sampling": {"warp": 9}}, "sampling"),
    ({"default_preset": "Nope"}, "default_preset"),
    ({"presets": [{"name": "", "prompt": ""}]}, "presets"),
    ({"model": ""}, "model"),
])
def test_invalid_values_get_a_clear_error(change, field):
    d = Settings().to_dict()
    d.update(change)
    with pytest.raises(SettingsError, match=f"^{field}"):
        Settings.from_dict(d)


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", json.dumps({"sampling": {"top_k": -5}})])
def test_malformed_file_is_moved_aside_with_a_message(tmp_path, content):
    path = tmp_path / "settings.json"
    path.write_text(content)
    s, notice = SettingsFile(path).load()
    assert s == Settings()
    assert notice and "kept as" in notice
    moved = list(tmp_path.glob("settings.json.invalid-*"))
    assert len(moved) == 1 and moved[0].read_text() == content  # kept, never overwritten
    assert not path.exists()


def test_one_invalid_field_keeps_the_others_and_the_original(tmp_path):
    path = tmp_path / "settings.json"
    mine = [{"name": "Mine", "prompt": "be kind"}]
    d = Settings(context=2048, theme="dark", presets=mine, default_preset="Mine").to_dict()
    d["sampling"].update(temperature=0.3, top_k=-5)
    d["draft"] = "model"  # a value only a newer Hearth knows
    d["last_working"] = {"model": "bundled", "context": 2048}
    path.write_text(json.dumps(d))
    original = path.read_text()
    f = SettingsFile(path)
    s, notice = f.load()
    assert (s.context, s.theme, s.presets, s.default_preset) == (2048, "dark", mine, "Mine")
    assert s.sampling["temperature"] == 0.3 and s.sampling["top_k"] == Settings().sampling["top_k"]
    assert s.draft == "auto"
    assert "draft" in notice and "'model'" in notice and "top_k" in notice and "kept as" in notice
    assert "theme" not in notice and "context" not in notice
    backup = list(tmp_path.glob("settings.json.invalid-*"))
    assert len(backup) == 1 and backup[0].read_text() == original
    assert f.rolled_back(Settings()).context == 2048  # the rollback target was valid, so it stays
    f.save(s)
    again, notice = SettingsFile(path).load()
    assert notice is None and again == s


def test_bad_presets_and_a_bad_rollback_target_are_dropped_on_their_own(tmp_path):
    path = tmp_path / "settings.json"
    d = Settings(context=4096).to_dict()
    d["presets"] = [{"name": "Good", "prompt": "x"}, {"name": "", "prompt": "y"}, {"name": "Good", "prompt": "dup"}]
    d["default_preset"] = "Gone"
    d["last_working"] = {"model": "bundled", "context": 5}
    d["model"] = ""
    path.write_text(json.dumps(d))
    f = SettingsFile(path)
    s, notice = f.load()
    assert s.context == 4096 and s.model == "bundled"
    assert s.presets == [{"name": "Good", "prompt": "x"}] and s.default_preset == "Good"
    for name in ("model", "presets", "default_preset", "last_working"):
        assert name in notice
    assert f.last_working is None and f.rolled_back(s).context is AUTO


def test_last_working_model_is_the_rollback_target(tmp_path):
    f = SettingsFile(tmp_path / "settings.json")
    good = Settings(context=2048)
    f.mark_working(good)
    bad = Settings(model="/nowhere/missing.gguf", context=4096)
    f.save(bad)
    f2 = SettingsFile(tmp_path / "settings.json")
    loaded, _ = f2.load()
    assert loaded.model == "/nowhere/missing.gguf"
    back = f2.rolled_back(loaded)
    assert (back.model, back.context) == ("bundled", 2048)
    assert back.sampling == loaded.sampling  # only the model set-up rolls back


def test_rollback_without_history_is_the_bundled_model(tmp_path):
    f = SettingsFile(tmp_path / "settings.json")
    assert f.rolled_back(Settings(model="/x.gguf")).model == "bundled"


def test_code_blocks_and_notes():
    md = "text\n```python\nprint(1)\n```\nmore\n~~~\nraw\n~~~\n```\nunclosed"
    assert code_blocks(md) == ["print(1)", "raw", "unclosed"]
    assert code_blocks("no code") == []
    assert finish_note(True, "eos", None) == ""
    assert "Stopped" in finish_note(False, "cancelled", None)
    assert "Interrupted" in finish_note(False, None, None)
    assert "boom" in finish_note(False, "error", "boom")
    line = metrics_line({"generated_tokens": 5, "decode_tok_s": 50.0, "ttft_ms": 20, "prompt_tokens": 9,
                         "cached_tokens": 4, "finish_reason": "eos"})
    assert "5 tokens" in line and "50.0 tok/s" in line and "cached 4" in line
    assert human_bytes(3 * 1024 * 1024) == "3.0 MiB"


def test_memory_estimate_for_the_bundled_model(bundled_path):
    from engine.models.gguf import model_info

    info = model_info(bundled_path)
    est = quick_estimate(info, 2048)
    assert est.n_ctx == 2048
    assert est.weights == info.weight_bytes
    assert est.kv == int(info.kv_bytes_per_token(2.0) * 2048)
    assert est.fits  # 135M parameters fit anywhere this test runs
    assert quick_estimate(info, None).n_ctx == auto_context(info.n_ctx_train)


def test_segment_bounds_cut_only_between_top_level_blocks():
    from app.core.text_utils import segment_bounds

    md = ("para one\n\n```python\nx = 1\n\ny = 2\n```\n\n1. item\n\n   continued\n2. next\n\n"
          "last para\n")
    cuts = segment_bounds(md, 0, 1)
    pieces = [md[a:b] for a, b in zip([0, *cuts], [*cuts, len(md)])]
    assert "".join(pieces) == md
    assert all(p.count("```") % 2 == 0 for p in pieces)  # never inside a code fence
    assert not any(md[c].isspace() for c in cuts)  # never before an indented continuation
    assert md[cuts[0]:].startswith("```python")
    assert any(md[c:].startswith("last para") for c in cuts)
    assert segment_bounds(md, 0, 10_000) == []  # pieces are at least min_chars long
    assert segment_bounds("no blank lines at all", 0, 1) == []
    later = segment_bounds(md, cuts[0], 1)
    assert later and later[0] > cuts[0]


TODAYS_FILE = "tests/fixtures/settings/settings-v2.json"  # written by the release before version 3, every field


def test_todays_settings_file_migrates_without_losing_a_value(tmp_path):
    path = tmp_path / "settings.json"
    path.write_bytes(open(TODAYS_FILE, "rb").read())
    before = json.loads(path.read_text())
    f = SettingsFile(path)
    s, notice = f.load()
    assert notice is None and not list(tmp_path.glob("settings.json.invalid-*"))
    # The reply length cap was the old default, written out because every field is: it becomes "no cap".
    assert s.sampling.get("max_tokens") is None and s.sampling_params().max_tokens is None
    f.save(s)
    after = json.loads(path.read_text())
    assert after["version"] == FORMAT_VERSION
    for key, value in before.items():
        if key == "version":
            continue
        if key == "sampling":
            assert {k: v for k, v in after[key].items() if k != "max_tokens"} == \
                {k: v for k, v in value.items() if k != "max_tokens"}
        else:
            assert after[key] == value, key
    assert SettingsFile(path).load() == (s, None)


def test_a_reply_length_chosen_before_version_3_is_kept(tmp_path):
    raw = json.loads(open(TODAYS_FILE).read())
    raw["sampling"]["max_tokens"] = 2048
    (tmp_path / "settings.json").write_text(json.dumps(raw))
    s, notice = SettingsFile(tmp_path / "settings.json").load()
    assert notice is None and s.sampling["max_tokens"] == 2048 and s.sampling_params().max_tokens == 2048
    raw["version"] = 3  # a file of this version that says 512 means 512
    raw["sampling"]["max_tokens"] = 512
    (tmp_path / "settings.json").write_text(json.dumps(raw))
    assert SettingsFile(tmp_path / "settings.json").load()[0].sampling["max_tokens"] == 512

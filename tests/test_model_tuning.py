""""Apply best" sets a model's own load settings: kept by the model's content (a renamed copy keeps them, another
model does not get them), stored with each model's settings, rolled back, checked when read, and moved there
from a settings file that kept them by the model's path (app/core/model_defaults.py, tuning_records.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.library.model_settings import parse_value, value_problem
from engine.library.model_store import FILE_NAME, ModelStore
from engine.sizing.load_spec import LoadSpec

from app.core.model_defaults import (apply_tuning, identify, is_tuned, model_load, roll_back_tuning, with_yours,
                                     yours)
from app.core.settings import FORMAT_VERSION, Settings, SettingsError, SettingsFile
from gguf_copy import same_renamed_and_other

V3_FILE = "tests/fixtures/settings/settings-v3.json"  # version 3, "Apply best" applied to the bundled model


@pytest.fixture(scope="module")
def models(bundled_path, tmp_path_factory):
    """Model A (a copy of the bundled file), a renamed copy of A elsewhere, and model B (other content)."""
    return same_renamed_and_other(bundled_path, tmp_path_factory.mktemp("tuned"))


def _ident(path, data_dir):
    return identify(LoadSpec(model=str(path)), data_dir)


def test_apply_best_is_the_model_s_own_and_survives_a_restart(models, data_dir):
    a, renamed, b = models
    ia, ib, ir = (_ident(p, data_dir) for p in (a, b, renamed))
    assert ia.key == ir.key != ib.key and ia.key is not None
    s = Settings(model=str(a), kv_type="f16", n_threads=2)
    tuned = apply_tuning(s, ia, {"kv_type": "q8_0", "exactness": "fast", "draft": "none"})
    # the settings for every model are as they were; model A loads with its own
    assert (tuned.kv_type, tuned.n_threads, tuned.exactness, tuned.draft) == ("f16", 2, s.exactness, "auto")
    assert yours(tuned, ia) == {"kv_type": "q8_0", "exactness": "fast", "draft": "none"}
    got = model_load(tuned, ia)
    assert (got.kv_type, got.exactness, got.draft, got.n_threads) == ("q8_0", "fast", "none", 2)
    other = model_load(tuned, ib)  # model B loads without A's tuned values
    assert (other.kv_type, other.exactness, other.draft) == ("f16", s.exactness, "auto")
    assert model_load(tuned, ir).kv_type == "q8_0"  # a renamed copy elsewhere is the same model
    assert is_tuned(tuned, ia) and not is_tuned(tuned, ib)
    again = apply_tuning(tuned, ia, {"kv_type": "q4_0", "n_threads": 1})  # a second apply keeps the first "before"
    f = SettingsFile(data_dir / "settings.json")
    f.save(again)
    stored = json.loads((data_dir / FILE_NAME).read_text())["models"][ia.key]
    assert stored == {"name": "a.gguf", "values": {"kv_type": "q4_0", "exactness": "fast", "draft": "none",
                                                    "n_threads": 1}}
    loaded, notice = SettingsFile(data_dir / "settings.json").load()  # a restart
    assert notice is None and loaded == again
    back = roll_back_tuning(loaded, ir)  # by the renamed copy: the same model
    assert yours(back, ia) == {} and back.tuning == {} and ia.key not in back.models
    assert model_load(back, ia) == model_load(s, ia) == s.load_spec()
    with pytest.raises(SettingsError, match="nothing to roll back"):
        roll_back_tuning(back, ia)
    with pytest.raises(SettingsError, match="'prefix_cache' is not a setting a benchmark row can apply"):
        apply_tuning(s, ia, {"prefix_cache": False})
    with pytest.raises(SettingsError, match="kv_type must be one of"):
        apply_tuning(s, ia, {"kv_type": "q9"})
    with pytest.raises(SettingsError, match="not identified"):
        apply_tuning(s, _ident(data_dir / "missing.gguf", data_dir), {"kv_type": "q8_0"})


def test_roll_back_gives_back_the_model_s_own_values_and_keeps_the_others(models, data_dir):
    a, _renamed, _b = models
    ia = _ident(a, data_dir)
    s = with_yours(Settings(model=str(a)), ia, {"temperature": 0.3, "context": 1024, "kv_type": "q4_0"})
    tuned = apply_tuning(s, ia, {"kv_type": "q8_0", "gpu_layers": 0})
    assert yours(tuned, ia) == {"temperature": 0.3, "context": 1024, "kv_type": "q8_0", "gpu_layers": 0}
    assert tuned.tuning[ia.key] == {"applied": {"kv_type": "q8_0", "gpu_layers": 0}, "previous": {"kv_type": "q4_0"}}
    load = model_load(tuned, ia)
    assert (load.context, load.kv_type, load.gpu_layers) == (1024, "q8_0", 0)
    back = roll_back_tuning(tuned, ia)
    assert yours(back, ia) == {"temperature": 0.3, "context": 1024, "kv_type": "q4_0"}


def test_a_bad_load_value_in_model_settings_names_the_model_and_the_key(models, data_dir):
    a, _renamed, b = models
    ia, ib = _ident(a, data_dir), _ident(b, data_dir)
    path = data_dir / FILE_NAME
    path.write_text(json.dumps({"version": 1, "models": {
        ia.key: {"name": "a.gguf", "values": {"kv_type": "q9_9", "temperature": 0.5}},
        ib.key: {"name": "b.gguf", "values": {"n_threads": 4, "gpu_layers": "all", "exactness": "fast"}}}}))
    original = path.read_text()
    entries, notice = ModelStore(path).load()
    assert notice is not None and "a.gguf: kv_type must be one of auto, f16, q8_0, q4_0, got 'q9_9'" in notice
    assert list(entries) == [ib.key] and entries[ib.key].values["gpu_layers"] == "all"
    kept = list(data_dir.glob(f"{FILE_NAME}.invalid-*"))
    assert len(kept) == 1 and kept[0].read_text() == original  # nothing lost: the file as it was, kept
    for key, bad in (("n_threads", 0), ("gpu_layers", -1), ("gpu_layers", True), ("exactness", "turbo"),
                     ("draft", "small.bin"), ("draft", None)):
        assert key in (value_problem(key, bad) or ""), (key, bad)
    assert value_problem("draft", str(a)) is None  # a draft by its file
    assert (parse_value("gpu_layers", "all"), parse_value("gpu_layers", "12"), parse_value("draft", "None"),
            parse_value("kv_type", "Q8_0"), parse_value("n_threads", "3")) == ("all", 12, "none", "q8_0", 3)


def _v3_file(data_dir: Path) -> tuple[Path, dict]:
    path = data_dir / "settings.json"
    shutil.copyfile(V3_FILE, path)
    return path, json.loads(path.read_text())


def test_a_tuning_kept_by_the_model_s_path_moves_to_the_model_once_it_is_known(data_dir):
    path, before = _v3_file(data_dir)
    assert before["version"] == 3 and before["tuning"] == {"bundled": {
        "applied": {"kv_type": "q8_0", "exactness": "exact", "n_threads": 2},
        "previous": {"kv_type": "f16", "exactness": "fast", "n_threads": 4}}}
    # Not hashed yet (a fresh data folder): the record waits, and the settings for every model still hold it.
    f = SettingsFile(path)
    s, notice = f.load()
    assert notice is None and s.tuning == {} and s.tuning_by_path == before["tuning"] and s.models == {}
    assert (s.kv_type, s.exactness, s.n_threads) == ("q8_0", "exact", 2)
    f.save(s)
    assert json.loads(path.read_text())["version"] == FORMAT_VERSION
    assert SettingsFile(path).load()[0] == s  # kept as it is until then
    # Once the model is known by its content (a load hashes it), the next start moves it.
    ident = identify(s.load_spec(), data_dir)
    moved, notice = SettingsFile(path).load()
    assert notice is None and moved.tuning_by_path == {}
    assert yours(moved, ident) == {"kv_type": "q8_0", "exactness": "exact", "n_threads": 2}
    assert moved.tuning == {ident.key: {"applied": {"kv_type": "q8_0", "exactness": "exact", "n_threads": 2},
                                        "previous": {}}}
    # what "Apply best" replaced is the setting for every model again; the bundled model loads as it did
    assert (moved.kv_type, moved.exactness, moved.n_threads) == ("f16", "fast", 4)
    assert model_load(moved, ident) == s.load_spec()
    # every other value is kept
    for key, value in before.items():
        if key not in ("version", "tuning", "kv_type", "exactness", "n_threads", "last_working"):
            assert getattr(moved, key) == (tuple(value) if key == "workers" else value), key
    SettingsFile(path).save(moved)
    assert SettingsFile(path).load() == (moved, None)  # survives a restart
    back = roll_back_tuning(moved, ident)
    assert yours(back, ident) == {} and model_load(back, ident) == back.load_spec()


def test_a_chain_of_path_records_gives_back_the_setting_from_before_the_first(models, data_dir):
    """Model A tuned, then model B: B's record says it replaced A's values. Moving both (the newest first)
    gives every model the settings from before either was applied."""
    a, _renamed, b = models
    ia, ib = _ident(a, data_dir), _ident(b, data_dir)
    path, raw = _v3_file(data_dir)
    raw.update(model=str(b), source="gguf", kv_type="q4_0", exactness="exact", tuning={
        str(a): {"applied": {"kv_type": "q8_0"}, "previous": {"kv_type": "f16"}},
        str(b): {"applied": {"kv_type": "q4_0", "exactness": "exact"},
                 "previous": {"kv_type": "q8_0", "exactness": "fast"}}})
    del raw["last_working"]
    path.write_text(json.dumps(raw))
    s, notice = SettingsFile(path).load()
    assert notice is None and s.tuning_by_path == {}
    assert (s.kv_type, s.exactness) == ("f16", "fast")
    assert (model_load(s, ia).kv_type, model_load(s, ib).kv_type, model_load(s, ib).exactness) == \
        ("q8_0", "q4_0", "exact")

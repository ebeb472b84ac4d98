"""Each model's own settings: what the model recommends (a GGUF's general.sampling keys written by gguf-py, a
real Qwen2.5 generation_config.json), the layers a reply's settings come from, and the file that keeps a
model's settings by its content."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from engine.errors import HearthError
from engine.library.model_settings import LAYERS, layered, parse_value, value_problem, values_problem
from engine.library.model_store import ModelEntry, ModelStore, model_key
from engine.models.recommended import NONE, Recommended, from_generation_config, recommended
from gguf_copy import QWEN3_SAMPLING, with_metadata

QWEN25 = Path(__file__).parent / "fixtures" / "generation_configs" / "Qwen2.5-3B-Instruct"
# The SHA-256 of Qwen/Qwen2.5-3B-Instruct's generation_config.json as published (revision aa8e7253; the 7B's is
# the same file): the fixture is those bytes, not a paraphrase.
QWEN25_SHA256 = "ea35dfb6fc5051b01114f9b995820d55dab01ed33ee490f6378b442af82c09f9"


@pytest.fixture(scope="module")
def sampling_gguf(bundled_path, tmp_path_factory):
    return with_metadata(Path(bundled_path), tmp_path_factory.mktemp("rec") / "with-sampling.gguf", QWEN3_SAMPLING)


def test_a_gguf_s_general_sampling_keys_are_its_recommendations(sampling_gguf):
    rec = recommended(sampling_gguf)
    assert rec.values == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repeat_penalty": 1.05,
                          "penalty_last_n": 128}  # 32-bit floats read back to their precision
    assert rec.source == "the GGUF file's general.sampling keys"
    assert rec.notes == ("general.sampling.mirostat not used: Hearth has no Mirostat sampler",)


def test_a_gguf_without_them_recommends_nothing(bundled_path):
    assert recommended(bundled_path) is NONE


def test_a_recommendation_the_sampler_refuses_is_left_out_with_a_note(bundled_path, tmp_path):
    path = with_metadata(Path(bundled_path), tmp_path / "bad.gguf",
                         {"general.sampling.top_p": 0.0, "general.sampling.temp": 0.8, "general.sampling.foo": 1.0})
    rec = recommended(path)
    assert rec.values == {"temperature": 0.8}
    assert any("general.sampling.top_p left out: top_p must be in (0, 1]" in n for n in rec.notes)
    assert "general.sampling.foo not used: Hearth does not know it" in rec.notes


def test_the_published_qwen2_5_generation_config_is_read():
    assert hashlib.sha256((QWEN25 / "generation_config.json").read_bytes()).hexdigest() == QWEN25_SHA256
    rec = recommended(QWEN25)
    assert rec.values == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repeat_penalty": 1.05}
    assert rec.source == "the model's generation_config.json" and rec.notes == ()


def test_do_sample_false_is_greedy_and_a_damaged_config_is_a_note(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.9,
                                                                 "max_new_tokens": 300}))
    rec = from_generation_config(tmp_path)
    assert rec.values == {"temperature": 0.0, "max_tokens": 300} and "greedy" in rec.notes[0]
    (tmp_path / "generation_config.json").write_text("{not json")
    rec = from_generation_config(tmp_path)
    assert rec.values == {} and "cannot be read" in rec.notes[0]
    assert from_generation_config(tmp_path / "nowhere") is NONE


def test_layers_stack_and_say_where_each_value_comes_from():
    model = Recommended({"temperature": 0.6, "top_k": 20}, "the GGUF file's general.sampling keys")
    got = layered({"temperature": 0.3, "top_p": 0.9}, model, yours={"top_k": 40, "max_tokens": 2048},
                  chat={"max_tokens": 100}, request={"temperature": 1.0})
    assert got.values["temperature"] == 1.0 and got.layers["temperature"] == "request"
    assert got.values["top_k"] == 40 and got.layers["top_k"] == "yours"
    assert got.values["max_tokens"] == 100 and got.layers["max_tokens"] == "chat"
    assert got.values["top_p"] == 0.9 and got.layers["top_p"] == "hearth"
    assert got.values["min_p"] == 0.05 and got.layers["min_p"] == "hearth"  # the engine's own default
    assert got.label("top_k") == "yours for this model"
    p = got.params()
    assert (p.temperature, p.top_k, p.top_p, p.max_tokens) == (1.0, 40, 0.9, 100)
    without_request = layered({"temperature": 0.3}, model)
    assert without_request.values["temperature"] == 0.6 and without_request.label("temperature") == \
        "the model's recommendation"
    assert set(got.layers.values()) <= set(LAYERS)


def test_a_bad_value_in_a_layer_is_left_out_not_fatal():
    got = layered(yours={"top_p": 0, "temperature": 0.2, "stop": ["</s>"]})
    assert got.values["temperature"] == 0.2 and got.layers["top_p"] == "hearth"
    assert any("top_p" in n for n in got.notes)
    assert got.params().stop == ("</s>",)


@pytest.mark.parametrize("key, text, value", [
    ("temperature", "0.6", 0.6), ("top_k", "20", 20), ("max_tokens", "none", None), ("seed", "", None),
    ("think", "off", False), ("think", "high", "high"), ("stop", "</s>, ###", ["</s>", "###"]),
    ("system_prompt", "  You are terse. ", "  You are terse. "), ("context", "8192", 8192),
])
def test_a_value_typed_in_a_terminal(key, text, value):
    assert parse_value(key, text) == value


@pytest.mark.parametrize("key, text, says", [
    ("warmth", "1", "'warmth' is not a setting"), ("top_k", "many", "top_k: 'many' is not a number"),
    ("top_p", "0", "top_p must be in (0, 1]"), ("context", "10", "context must be a whole number from 256"),
    ("max_tokens", "0", "max_tokens must be a whole number >= 1"),
])
def test_a_bad_value_typed_in_a_terminal_says_why(key, text, says):
    with pytest.raises(HearthError) as e:
        parse_value(key, text)
    assert says in str(e.value)


def test_values_are_checked_key_by_key():
    assert values_problem({"temperature": 0.5, "messages": [{"role": "user", "content": "hi"}]}) is None
    assert "messages" in values_problem({"messages": [{"role": "tool", "content": "x"}]})
    assert value_problem("top_k", 2.5) == "top_k must be a whole number, got 2.5"
    assert value_problem("temperature", None) == "temperature must be a number, got nothing"
    assert value_problem("max_tokens", None) is None and value_problem("reasoning_budget", None) is None


def test_a_model_s_settings_follow_its_content_not_its_name(bundled_path, tmp_path):
    memo = tmp_path / "memo"
    a = tmp_path / "a.gguf"
    shutil.copyfile(bundled_path, a)
    assert model_key("gguf", str(a), memo, memo_only=True) is None  # never hashed: the window does not wait
    key = model_key("gguf", str(a), memo)
    assert key == hashlib.sha256(a.read_bytes()).hexdigest() == model_key("bundled", "bundled", memo)
    assert model_key("gguf", str(a), memo, memo_only=True) == key
    moved = tmp_path / "elsewhere" / "renamed.gguf"
    moved.parent.mkdir()
    a.rename(moved)
    assert model_key("gguf", str(moved), memo) == key
    assert model_key("remote", "http://127.0.0.1:8080/v1#qwen", memo) == "remote:http://127.0.0.1:8080/v1#qwen"
    assert model_key("gguf", str(tmp_path / "missing.gguf"), memo) is None
    assert model_key("hub", "nobody/nothing", memo) is None  # not downloaded: no key yet


def test_a_folder_s_key_covers_its_config_and_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "generation_config.json").write_text("{}")
    key = model_key("hf_dir", str(tmp_path), None)
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.1}')  # not the model's identity
    assert model_key("hf_dir", str(tmp_path), None) == key
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    assert model_key("hf_dir", str(tmp_path), None) != key


def test_the_store_round_trips_and_keeps_the_good_entries_of_a_damaged_file(tmp_path):
    store = ModelStore(tmp_path / "model-settings.json")
    assert store.load() == ({}, None)
    entries = {"abc": ModelEntry("qwen3.gguf", {"temperature": 0.6, "system_prompt": "Be brief."}),
               "def": ModelEntry("smol.gguf", {"max_tokens": None, "stop": ["###"]})}
    store.save(entries)
    assert store.load() == (entries, None)
    raw = json.loads(store.path.read_text())
    raw["models"]["bad"] = {"name": "broken.gguf", "values": {"top_p": 7}}
    store.path.write_text(json.dumps(raw))
    got, notice = store.load()
    assert got == entries and "broken.gguf: top_p must be in (0, 1]" in notice and "kept as" in notice
    assert len(list(tmp_path.glob("model-settings.json.invalid-*"))) == 1
    with pytest.raises(HearthError, match="temperature must be >= 0"):
        store.save({"x": ModelEntry("x.gguf", {"temperature": -1})})
    assert store.load() == ({}, None)  # the damaged file went aside and the refused save wrote nothing


def test_an_unreadable_store_is_moved_aside_with_a_message(tmp_path):
    path = tmp_path / "model-settings.json"
    path.write_bytes(b"\x00\x01binary")
    got, notice = ModelStore(path).load()
    assert got == {} and "could not be read" in notice and not path.exists()

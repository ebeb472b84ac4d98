"""`engine models defaults MODEL` from a terminal, and `engine chat` replying with the model's own settings:
checked on the SamplingParams the real engine is given."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.engine import Engine
from engine.library.model_store import ModelStore
from gguf_copy import QWEN3_SAMPLING, with_metadata

PRESETS = Path(__file__).parent / "fixtures" / "presets"


@pytest.fixture(scope="module")
def thinking_gguf(bundled_path, tmp_path_factory):
    return with_metadata(Path(bundled_path), tmp_path_factory.mktemp("cli") / "qwen3-like.gguf", QWEN3_SAMPLING)


def defaults(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["models", "defaults", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_layers_of_a_model_and_changing_them_from_a_terminal(thinking_gguf, data_dir, capsys):
    code, out, _ = defaults(capsys, str(thinking_gguf))
    assert code == 0 and "qwen3-like.gguf" in out
    line = next(x for x in out.splitlines() if x.split()[:1] == ["temperature"])
    assert line.split()[1] == "0.6" and line.endswith("the model's recommendation")
    assert "note: general.sampling.mirostat not used: Hearth has no Mirostat sampler" in out
    code, out, _ = defaults(capsys, str(thinking_gguf), "--set", "temperature=0.3", "--set", "max_tokens=2048",
                            "--import", str(PRESETS / "mario.Modelfile"), "--json")
    got = json.loads(out)["settings"]
    assert code == 0 and got["temperature"] == {"value": 0.3, "layer": "yours"}
    assert got["top_k"] == {"value": 20, "layer": "model"} and got["max_tokens"] == {"value": 2048, "layer": "yours"}
    assert got["system_prompt"]["value"].startswith("You are Mario") and got["context"]["value"] == 4096
    code, out, _ = defaults(capsys, str(thinking_gguf), "--reset", "temperature", "--json")
    assert json.loads(out)["settings"]["temperature"] == {"value": 0.6, "layer": "model"}


@pytest.mark.parametrize("args, says", [
    (["--set", "top_p=0"], "hearth: error: top_p must be in (0, 1], got 0.0"),
    (["--set", "warmth=1"], "hearth: error: 'warmth' is not a setting"),
    (["--set", "kv_type=q9_0"], "hearth: error: kv_type must be one of auto, f16, q8_0, q4_0, got 'q9_0'"),
    (["--set", "temperature"], "hearth: error: --set takes key=value"),
    (["--import", str(PRESETS / "llama3.2-show.Modelfile")],
     "hearth: error: llama3.2-show.Modelfile: line 5: Hearth renders the model's own chat template"),
])
def test_a_bad_change_from_a_terminal_is_one_line_and_changes_nothing(thinking_gguf, data_dir, capsys, args, says):
    assert defaults(capsys, str(thinking_gguf), "--set", "seed=7")[0] == 0
    before = ModelStore().path.read_bytes()
    code, out, err = defaults(capsys, str(thinking_gguf), "--set", "temperature=0.1", *args)
    assert code != 0 and out == "" and err.startswith(says) and err.count("\n") == 1
    assert ModelStore().path.read_bytes() == before


def test_engine_chat_replies_with_the_model_s_settings_under_its_flags(thinking_gguf, data_dir, capsys,
                                                                     monkeypatch):
    mine = ("--set", "max_tokens=6", "--set", "system_prompt=Answer in French.", "--set", "exactness=fast",
            "--set", "kv_type=q8_0")  # the last two as "Apply best" sets them in the window
    assert defaults(capsys, str(thinking_gguf), *mine)[0] == 0
    seen = []
    real = Engine.stream

    def stream(self, messages, params=None, **kw):  # the real engine, with its arguments recorded
        seen.append((list(messages), params))
        return real(self, messages, params, **kw)
    monkeypatch.setattr(Engine, "stream", stream)
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\n"))
    assert main(["chat", "--model", str(thinking_gguf), "--top-p", "0.5", "--ctx", "512"]) == 0
    (messages, params), = seen
    assert (params.temperature, params.top_k, params.top_p, params.max_tokens) == (0.6, 20, 0.5, 6)
    assert (params.repeat_penalty, params.penalty_last_n) == (1.05, 128)  # the model's, yours, the flag, yours
    assert [(m.role, m.content) for m in messages] == [("system", "Answer in French."), ("user", "Hello")]
    err = capsys.readouterr().err
    assert "settings from the model's recommendation and yours for this model: temperature 0.6, top_k 20" in err
    assert ", fast kernels." in err  # the model's own load settings apply to its load


def test_engine_chat_refuses_a_bad_flag_before_loading(data_dir, capsys):
    assert main(["chat", "--temp", "-1"]) == 2
    assert capsys.readouterr().err.startswith("hearth: error: --temperature: temperature must be >= 0")


def test_engine_chat_on_a_folder_uses_its_generation_config(tmp_path, data_dir, capsys, monkeypatch):
    """A transformers folder carrying Qwen2.5's published generation_config.json (a tiny random Llama wearing
    it): its recommendations reach the sampler of the transformers backend."""
    import shutil

    from tiny_hf import make_tiny_model

    folder = make_tiny_model(tmp_path / "tiny-qwen-config")
    shutil.copyfile(Path(__file__).parent / "fixtures" / "generation_configs" / "Qwen2.5-3B-Instruct" /
                    "generation_config.json", folder / "generation_config.json")
    seen = []
    real = Engine.stream

    def stream(self, messages, params=None, **kw):
        seen.append(params)
        return real(self, messages, params, **kw)
    monkeypatch.setattr(Engine, "stream", stream)
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\n"))
    assert main(["chat", "--model", str(folder), "--max-tokens", "3", "--threads", "1"]) == 0
    (params,) = seen
    assert (params.temperature, params.top_p, params.top_k, params.repeat_penalty) == (0.7, 0.8, 20, 1.05)
    assert "settings from the model's recommendation: temperature 0.7, top_k 20, top_p 0.8" in capsys.readouterr().err

"""Presets people share: real Ollama Modelfiles from Ollama's reference, real LM Studio presets, Hearth's own
export; and every malformed or hostile file is one line naming the line, with nothing imported."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.library.preset_files import MAX_PRESET_BYTES, PresetError, export_preset, read_preset

PRESETS = Path(__file__).parent / "fixtures" / "presets"


def read(name: str):
    return read_preset((PRESETS / name).read_bytes())


def test_ollama_s_basic_modelfile():
    p = read("mario.Modelfile")
    assert p.kind == "Ollama Modelfile" and p.name == "llama3.2"
    assert p.values == {"temperature": 1.0, "context": 4096,
                        "system_prompt": "You are Mario from super mario bros, acting as an assistant."}
    assert p.notes == ()


def test_a_modelfile_with_a_template_is_refused_with_the_reason():
    with pytest.raises(PresetError) as e:
        read("llama3.2-show.Modelfile")
    msg = str(e.value)
    assert msg.startswith("line 5: Hearth renders the model's own chat template") and "\n" not in msg


def test_the_same_modelfile_without_its_template_imports_its_stop_strings():
    text = (PRESETS / "llama3.2-show.Modelfile").read_text()
    start, end = text.index("TEMPLATE"), text.index('"""\nPARAMETER') + 4
    p = read_preset((text[:start] + text[end:]).encode())
    assert p.values == {"stop": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                 "<|reserved_special_token"]}


def test_messages_quotes_and_known_parameters_hearth_does_not_use():
    text = ('FROM ./qwen3.gguf\n'
            'SYSTEM """You answer\nin one line."""\n'
            'PARAMETER num_predict -1\nPARAMETER repeat_last_n 128\nparameter top_k 20\n'
            'PARAMETER num_gpu 99\nlicense """MIT"""\n'
            # the conversation of Ollama's MESSAGE example
            'MESSAGE user Is Toronto in Canada?\nMESSAGE assistant yes\nMESSAGE user Is Sacramento in Canada?\n'
            'MESSAGE assistant no\n')
    p = read_preset(text.encode())
    assert p.name == "./qwen3.gguf"
    assert p.values == {"system_prompt": "You answer\nin one line.", "max_tokens": None, "penalty_last_n": 128,
                        "top_k": 20, "messages": [
                            {"role": "user", "content": "Is Toronto in Canada?"},
                            {"role": "assistant", "content": "yes"},
                            {"role": "user", "content": "Is Sacramento in Canada?"},
                            {"role": "assistant", "content": "no"}]}
    assert p.notes == ("line 7: PARAMETER num_gpu not taken: the memory plan places layers (Settings → Model → "
                       "GPU layers)", "line 8: LICENSE not taken: a licence is kept with the model, not its settings")


def test_lm_studio_presets():
    p = read("deepred-testing.preset.json")
    assert p.kind == "LM Studio preset" and p.name == "deepred-testing"
    assert p.values == {"top_p": 1.0, "max_tokens": 512, "stop": ["##"]}
    p = read("deepred-p3v4c.preset.json")
    assert p.values["temperature"] == 0 and p.values["top_k"] == 1 and p.values["max_tokens"] == 320
    assert p.values["context"] == 4096 and p.values["system_prompt"].startswith("You are Deep Red")


def test_an_unchecked_lm_studio_sampler_is_off():
    preset = {"name": "x", "operation": {"fields": [
        {"key": "llm.prediction.minPSampling", "value": {"checked": False, "value": 0.05}},
        {"key": "llm.prediction.maxPredictedTokens", "value": {"checked": False, "value": 1000}},
        {"key": "llm.prediction.seed", "value": {"checked": True, "value": -1}},
        {"key": "llm.prediction.llama.xtcProbability", "value": {"checked": False, "value": 0.5}}]}}
    text = json.dumps(preset, indent=2)
    p = read_preset(text.encode())
    assert p.values == {"min_p": 0.0, "max_tokens": None, "seed": None}
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "xtcProbability" in s)
    assert p.notes == (f"line {line}: llm.prediction.llama.xtcProbability not taken: Hearth has no such setting",)


def test_hearth_s_own_export_reads_back():
    values = {"temperature": 0.6, "top_k": 20, "max_tokens": None, "system_prompt": "Be brief.", "think": False}
    p = read_preset(export_preset("qwen3.gguf", values).encode())
    assert (p.kind, p.name, p.values) == ("Hearth model settings", "qwen3.gguf", values)


@pytest.mark.parametrize("data, says", [
    (b"FROM x\nPARAMETER warmth 3\n", "line 2: unknown parameter 'warmth'"),
    (b"FROM x\nPARAMETER temperature hot\n", "line 2: PARAMETER temperature: 'hot' is not a number"),
    (b"FROM x\n\nPARAMETER top_p 0\n", "line 3: PARAMETER top_p: top_p must be in (0, 1]"),
    (b"FROM x\nPARAMETER num_ctx 10\n", "line 2: PARAMETER num_ctx: context must be a whole number from 256"),
    (b"FROM x\nADAPTER ./lora.gguf\n", "line 2: Hearth loads no LoRA adapters"),
    (b"FROM x\nMESSAGE tool hi\n", "line 2: MESSAGE's role must be system, user or assistant"),
    (b"FROM x\nSYSTEM \"\"\"never closed\n\n", "line 2: the text opened with \"\"\" is never closed"),
    (b"FROM x\nRUN rm -rf /\n", "line 2: unknown instruction 'RUN'"),
    (b"PARAMETER temperature 1\n", "line 1: no FROM line"),
    (b"FROM x\n!!!\n", "line 2: a Modelfile line starts with an instruction"),
    (b'{"name": "x", "operation": {"fields": [\n{"key": "llm.prediction.temperature", "value": "hot"}]}}',
     "line 2: llm.prediction.temperature must be a number"),
    (b'{"name": "x", "operation": {"fields": [\n\n{"key": "llm.prediction.warp", "value": 1}]}}',
     "line 3: unknown setting 'llm.prediction.warp'"),
    (b'{"name": "x",\n "operation": {"fields": [\n{"key": "llm.prediction.promptTemplate", "value": {}}]}}',
     "line 3: Hearth renders the model's own chat template"),
    (b'{"name": "x", "inference_params": {"temp": 0.7}}', "line 1: this is LM Studio 0.2's preset format"),
    (b'{"name": "x",\n "operation": ', "line 2: not valid JSON"),
    (b'{"format": "hearth-model-settings", "values": {\n"top_k": -3}}', "line 2: top_k must be >= 0"),
    (b"FROM x\n\xff\xfe garbage\n", "line 2: this is not UTF-8 text"),
    (b"FROM x\nSYSTEM hi\n\x00\x01\x02binary", "line 3: this is not a text file"),
])
def test_a_malformed_or_hostile_file_is_one_line_naming_the_line(data, says):
    with pytest.raises(PresetError) as e:
        read_preset(data)
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_a_ten_megabyte_file_is_refused_before_it_is_read_as_text():
    data = b"FROM x\n" + b"# " + b"x" * (10 << 20) + b"\n"
    with pytest.raises(PresetError, match=f"a preset is at most {MAX_PRESET_BYTES:,} bytes"):
        read_preset(data)


def test_a_deeply_nested_json_file_is_an_error_not_a_crash():
    with pytest.raises(PresetError, match="line 1"):
        read_preset(b"[" * 200_000 + b"]" * 200_000)
    with pytest.raises(PresetError, match="line 1: an LM Studio preset is a JSON object|nested too deeply"):
        read_preset(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}")

"""Model settings people share as files: Hearth's own export, an Ollama Modelfile, an LM Studio preset.

- **Ollama Modelfile** (ollama/ollama docs/modelfile.mdx): ``INSTRUCTION arguments`` lines, ``#``
  comments, instructions in any case; an argument is the rest of the line, or quoted in ``"..."`` or
  ``\"\"\"...\"\"\"`` (which may span lines). ``FROM`` is required (it names the model; the settings go to
  the model they are imported for), ``PARAMETER`` sets a sampling value, ``SYSTEM`` the system prompt,
  ``MESSAGE`` example turns (``system`` is the system prompt again). ``TEMPLATE`` is refused: Hearth
  renders the model's own Jinja template in its sandbox. ``ADAPTER`` is refused (Hearth loads no LoRA
  adapters).
- **LM Studio preset** (0.3 and later, lmstudio-js's kv-config schema): ``{"name", "operation":
  {"fields": [{"key", "value"}]}, "load": {"fields": [...]}}``; a checkbox value is
  ``{"checked", "value"}`` (unchecked: the sampler is off). ``llm.prediction.promptTemplate`` is refused as
  TEMPLATE is. LM Studio 0.2's format (``inference_params``) is refused with what to do.

Every other known setting Hearth has no use for is listed in the notes; an unknown instruction or
setting, a bad value, a file over MAX_PRESET_BYTES or one that is not text is a PresetError naming the
line, and nothing is imported.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import HearthError
from .model_settings import value_problem, values_problem

MAX_PRESET_BYTES = 1 << 20   # a preset is a few KB; a long system prompt fits many times over
HEARTH_FORMAT = "hearth-model-settings"

# Ollama's PARAMETER names (api/types.go Options) -> Hearth's setting and the value's type
OLLAMA_PARAMS: dict[str, tuple[str, type]] = {
    "temperature": ("temperature", float), "top_k": ("top_k", int), "top_p": ("top_p", float),
    "min_p": ("min_p", float), "repeat_penalty": ("repeat_penalty", float), "repeat_last_n": ("penalty_last_n", int),
    "presence_penalty": ("presence_penalty", float), "frequency_penalty": ("frequency_penalty", float),
    "seed": ("seed", int), "num_predict": ("max_tokens", int), "num_ctx": ("context", int), "stop": ("stop", str),
}
OLLAMA_UNUSED = {
    "num_keep": "Hearth keeps the system prompt when a chat outgrows the context",
    "typical_p": "Hearth has no typical-p sampler", "num_batch": "the memory plan sizes batches",
    "num_gpu": "the memory plan places layers (Settings → Model → GPU layers)",
    "main_gpu": "the memory plan places layers", "use_mmap": "llama.cpp maps the file as it sees fit",
    "num_thread": "Settings → Model chooses threads", "draft_num_predict": "Hearth's drafts choose their length",
    "mirostat": "Hearth has no Mirostat sampler", "mirostat_eta": "Hearth has no Mirostat sampler",
    "mirostat_tau": "Hearth has no Mirostat sampler", "tfs_z": "Hearth has no tail-free sampler",
    "penalize_newline": "Hearth's penalties treat every token alike", "numa": "not a sampling setting",
    "low_vram": "the memory plan decides", "use_mlock": "not a sampling setting",
    "f16_kv": "Settings → Model → KV cache",
    "vocab_only": "not a sampling setting",
}
OLLAMA_NOTED = {"license": "a licence is kept with the model, not its settings",
                "requires": "a version of Ollama is not a setting",
                "draft": "choose a draft model in Settings → Model",
                "renderer": "Hearth reads the model's own template",
                "parser": "Hearth reads the model's own output format"}
OLLAMA_REFUSED = {
    "template": "Hearth renders the model's own chat template (Jinja, in its sandbox), so a Modelfile's "
                "TEMPLATE is not taken; remove the TEMPLATE lines to import the rest",
    "adapter": "Hearth loads no LoRA adapters; remove the ADAPTER line to import the rest",
}

# LM Studio's keys -> Hearth's setting, the value's type, and the value when a checkbox is off
LMS_KEYS: dict[str, tuple[str, type, Any]] = {
    "llm.prediction.temperature": ("temperature", float, None),
    "llm.prediction.topKSampling": ("top_k", int, 0),
    "llm.prediction.topPSampling": ("top_p", float, 1.0),
    "llm.prediction.minPSampling": ("min_p", float, 0.0),
    "llm.prediction.repeatPenalty": ("repeat_penalty", float, 1.0),
    "llm.prediction.maxPredictedTokens": ("max_tokens", int, None),
    "llm.prediction.seed": ("seed", int, None),
    "llm.prediction.llama.presencePenalty": ("presence_penalty", float, 0.0),
    "llm.prediction.llama.frequencyPenalty": ("frequency_penalty", float, 0.0),
    "llm.prediction.stopStrings": ("stop", list, None),
    "llm.prediction.systemPrompt": ("system_prompt", str, None),
    "llm.load.contextLength": ("context", int, None),
}
LMS_REFUSED = {"llm.prediction.promptTemplate": OLLAMA_REFUSED["template"].replace("a Modelfile's TEMPLATE",
                                                                                    "a preset's prompt template")
               .replace("the TEMPLATE lines", "that setting")}
# Known LM Studio settings Hearth has no use for (lmstudio-js's globalConfigSchematics): a note each, never an
# error. Any other key is one LM Studio does not write either: an error.
LMS_KNOWN = frozenset(
    [f"llm.prediction.{k}" for k in (
        "contextOverflowPolicy", "toolCallStopStrings", "structured", "tools", "contextPrefill", "logProbs",
        "reasoning.parsing", "speculativeDecoding.draftModel", "speculativeDecoding.minDraftLengthToConsider",
        "speculativeDecoding.numReuseTokens", "speculativeDecoding.minContinueDraftingProbability",
        "speculativeDecoding.maxTokensToDraft", "speculativeDecoding.numDraftTokensExact", "llama.cpuThreads",
        "llama.xtcProbability", "llama.xtcThreshold", "llama.mirostatSampling", "llama.tailFreeSampling",
        "llama.locallyTypicalSampling", "llama.logitBias")]
    + [f"llm.load.{k}" for k in (
        "numExperts", "seed", "offloadKVCacheToGpu", "maxExpertLayersOffload", "llama.acceleration.offloadRatio",
        "llama.cpuThreadPoolSize", "llama.evalBatchSize", "llama.flashAttention", "llama.ropeFrequencyBase",
        "llama.ropeFrequencyScale", "llama.keepModelInMemory", "llama.useFp16ForKVCache", "llama.tryMmap",
        "llama.kCacheQuantizationType", "llama.vCacheQuantizationType", "mlx.kvCacheQuantization")]
    + ["load.gpuSplitConfig", "load.gpuStrictVramCap", "envVars", "ext.virtualModel.customField"])
# Other runtimes' settings (MLX, transformers, ONNX): LM Studio keeps them under these.
LMS_OTHER_RUNTIMES = tuple(f"llm.{part}.{rt}." for part in ("prediction", "load") for rt in ("mlx", "transformers",
                                                                                          "onnx"))


class PresetError(HearthError):
    """A preset file that cannot be imported: the message names the line."""


@dataclass(frozen=True)
class ImportedPreset:
    """What a file sets (model_settings' keys), what kind of file it was, its name (an LM Studio
    preset's name, a Modelfile's FROM), and notes on what was read but not taken."""
    values: dict[str, Any]
    kind: str
    name: str
    notes: tuple[str, ...] = ()


def _text(data: bytes) -> str:
    if len(data) > MAX_PRESET_BYTES:
        raise PresetError(f"the file is {len(data):,} bytes; a preset is at most {MAX_PRESET_BYTES:,} bytes")
    nul = data.find(b"\0")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise PresetError(f"line {line}: this is not a text file (it holds a NUL byte)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise PresetError(f"line {line}: this is not UTF-8 text (byte 0x{data[e.start]:02x})") from None


def read_preset(data: bytes) -> ImportedPreset:
    """A preset file's settings: Hearth's export or an LM Studio preset (JSON), else an Ollama Modelfile."""
    text = _text(data)
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise PresetError(f"line {e.lineno}: not valid JSON ({e.msg})") from None
        except RecursionError:
            raise PresetError("line 1: the JSON is nested too deeply to be a preset") from None
        if isinstance(obj, dict) and obj.get("format") == HEARTH_FORMAT:
            return _hearth(obj, text)
        return lmstudio_preset(obj, text)
    return modelfile(text)


def read_preset_file(path: str | os.PathLike[str]) -> ImportedPreset:
    """A preset file's settings (:func:`read_preset`); a file over MAX_PRESET_BYTES is refused before it is
    read, so a hostile one of any size costs nothing."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_PRESET_BYTES:
            raise PresetError(f"the file is {size:,} bytes; a preset is at most {MAX_PRESET_BYTES:,} bytes")
        return read_preset(p.read_bytes())
    except OSError as e:
        raise PresetError(f"cannot read it: {e.strerror or e}") from None


def export_preset(name: str, values: dict[str, Any]) -> str:
    """A model's settings as Hearth's own preset file (JSON), which :func:`read_preset` reads back."""
    why = values_problem(values)
    if why:
        raise PresetError(why)
    return json.dumps({"format": HEARTH_FORMAT, "version": 1, "model": name, "values": values}, indent=2,
                      ensure_ascii=False) + "\n"


def _hearth(obj: dict, text: str) -> ImportedPreset:
    values = obj.get("values")
    if not isinstance(values, dict):
        raise PresetError(f"line {_line_of(text, _quoted('values'))}: a Hearth preset needs its values")
    for k, v in values.items():
        why = value_problem(k, v)
        if why:
            raise PresetError(f"line {_line_of(text, _quoted(k))}: {why}")
    return ImportedPreset(dict(values), "Hearth model settings", str(obj.get("model") or ""))


# -- Ollama ----------------------------------------------------------------------------------------------

_INSTRUCTION = re.compile(r"([A-Za-z]+)(?:[ \t]+(.*))?$")


def _argument(lines: list[str], i: int, first: str) -> tuple[str, int]:
    """An argument that starts on line ``i`` with ``first``: bare, or quoted (and then possibly over
    several lines); the value and the index of its last line."""
    s, j = first.strip(), i
    for quote in ('"""', '"'):
        if s.startswith(quote):
            while not (len(s) >= 2 * len(quote) and s.endswith(quote)):
                j += 1
                if j >= len(lines):
                    raise PresetError(f"line {i + 1}: the text opened with {quote} is never closed")
                s = (s + "\n" + lines[j]).strip()
            return s[len(quote):-len(quote)], j
    return s, j


def _number(name: str, text: str, kind: type, line: int) -> int | float:
    try:
        return int(text) if kind is int else float(text)
    except ValueError:
        raise PresetError(f"line {line}: PARAMETER {name}: {text!r} is not a "
                          f"{'whole number' if kind is int else 'number'}") from None


def _parameter(name: str, raw: str, line: int, values: dict[str, Any], notes: list[str]) -> None:
    if name in OLLAMA_UNUSED:
        notes.append(f"line {line}: PARAMETER {name} not taken: {OLLAMA_UNUSED[name]}")
        return
    if name not in OLLAMA_PARAMS:
        raise PresetError(f"line {line}: unknown parameter {name!r} (Ollama's are {', '.join(OLLAMA_PARAMS)}, "
                          f"{', '.join(OLLAMA_UNUSED)})")
    key, kind = OLLAMA_PARAMS[name]
    if key == "stop":
        if not raw:
            raise PresetError(f"line {line}: PARAMETER stop needs the text to stop at")
        value: Any = [*values.get("stop", []), raw]
    else:
        value = _number(name, raw, kind, line)
        if key == "max_tokens" and value in (-1, -2):
            value = None  # Ollama's "until the model stops" and "until the context is full"
        elif key == "seed" and value < 0:
            value = None  # random
    why = value_problem(key, value)
    if why:
        raise PresetError(f"line {line}: PARAMETER {name}: {why}")
    values[key] = value


def modelfile(text: str) -> ImportedPreset:
    """An Ollama Modelfile's settings (see the module's docstring)."""
    lines = text.splitlines()
    values: dict[str, Any] = {}
    notes: list[str] = []
    messages: list[dict[str, str]] = []
    frm = None
    i = 0
    while i < len(lines):
        line, n = lines[i].strip(), i + 1
        if not line or line.startswith("#"):
            i += 1
            continue
        m = _INSTRUCTION.match(line)
        if m is None:
            raise PresetError(f"line {n}: a Modelfile line starts with an instruction (FROM, PARAMETER, SYSTEM, "
                              f"MESSAGE, ...), not {line[:40]!r}")
        word, rest = m.group(1).lower(), m.group(2) or ""
        if word in OLLAMA_REFUSED:
            raise PresetError(f"line {n}: {OLLAMA_REFUSED[word]}")
        if word == "parameter":
            name, _, raw = rest.strip().partition(" ")
            value, i = _argument(lines, i, raw)
            _parameter(name.strip().lower(), value, n, values, notes)
        elif word == "message":
            role, _, raw = rest.strip().partition(" ")
            value, i = _argument(lines, i, raw)
            if role.lower() not in ("system", "user", "assistant"):
                raise PresetError(f"line {n}: MESSAGE's role must be system, user or assistant, not {role!r}")
            if role.lower() == "system":
                values["system_prompt"] = value
            else:
                messages.append({"role": role.lower(), "content": value})
        elif word in ("from", "system") or word in OLLAMA_NOTED:
            value, i = _argument(lines, i, rest)
            if word == "from":
                frm = value
            elif word == "system":
                values["system_prompt"] = value
            else:
                notes.append(f"line {n}: {word.upper()} not taken: {OLLAMA_NOTED[word]}")
        else:
            raise PresetError(f"line {n}: unknown instruction {m.group(1)!r} (a Modelfile has FROM, PARAMETER, "
                              "SYSTEM, MESSAGE, TEMPLATE, ADAPTER, LICENSE, REQUIRES)")
        i += 1
    if frm is None:
        raise PresetError("line 1: no FROM line (a Modelfile says FROM which model it is for)")
    if messages:
        values["messages"] = messages
    why = values_problem(values)
    if why:
        raise PresetError(f"line {len(lines)}: {why}")
    return ImportedPreset(values, "Ollama Modelfile", frm, tuple(notes))


# -- LM Studio -------------------------------------------------------------------------------------------

def _quoted(key: str) -> str:
    """``key`` as it is written in a JSON file (what to look for to find its line)."""
    return json.dumps(key, ensure_ascii=False)


def _line_of(text: str, needle: str, start: int = 0) -> int:
    at = text.find(needle, start)
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def _lms_value(key: str, raw: Any, line: int) -> Any:
    name, kind, off = LMS_KEYS[key]
    if isinstance(raw, dict) and set(raw) <= {"checked", "value"} and "value" in raw:
        if raw.get("checked") is False:
            return off
        raw = raw["value"]
    if kind is list:
        ok = isinstance(raw, list) and all(isinstance(s, str) for s in raw)
    elif kind is str:
        ok = isinstance(raw, str)
    else:
        ok = isinstance(raw, (int, float)) and not isinstance(raw, bool) and (kind is float or raw == int(raw))
    if not ok:
        what = {list: "a list of texts", str: "text", int: "a whole number"}.get(kind, "a number")
        raise PresetError(f"line {line}: {key} must be {what}, got {json.dumps(raw)[:60]}")
    if kind is int:
        raw = int(raw)
        if name == "top_k" and raw < 0:
            raw = 0  # LM Studio's -1: no top-k
        if name == "seed" and raw < 0:
            raw = None
    return raw


def lmstudio_preset(obj: Any, text: str) -> ImportedPreset:
    """An LM Studio preset's settings (see the module's docstring)."""
    if not isinstance(obj, dict):
        raise PresetError("line 1: an LM Studio preset is a JSON object")
    if "operation" not in obj and "load" not in obj:
        if "inference_params" in obj or "load_params" in obj:
            raise PresetError(f"line {_line_of(text, 'inference_params')}: this is LM Studio 0.2's preset format; "
                              "open it in LM Studio 0.3 or later and save it again, then import that file")
        raise PresetError("line 1: not a preset Hearth knows (an LM Studio preset has operation or load "
                          "fields; a Modelfile starts with FROM)")
    values: dict[str, Any] = {}
    notes: list[str] = []
    cursor = 0  # where the last field's key was found: the next one is after it
    for part in ("operation", "load"):
        section = obj.get(part, {"fields": []})
        fields = section.get("fields") if isinstance(section, dict) else None
        if not isinstance(fields, list):
            raise PresetError(f"line {_line_of(text, _quoted(part))}: {part} must hold a list of fields")
        for f in fields:
            key = f.get("key") if isinstance(f, dict) else None
            if not isinstance(key, str) or "value" not in f:
                raise PresetError(f"line {_line_of(text, '{', cursor + 1)}: each field needs a key and a value")
            found = text.find(_quoted(key), cursor)
            cursor = found if found >= 0 else cursor
            line = _line_of(text, _quoted(key), cursor)
            if key in LMS_REFUSED:
                raise PresetError(f"line {line}: {LMS_REFUSED[key]}")
            if key in LMS_KEYS:
                name = LMS_KEYS[key][0]
                value = _lms_value(key, f["value"], line)
                if value is None and name not in ("max_tokens", "seed"):
                    continue
                why = value_problem(name, value)
                if why:
                    raise PresetError(f"line {line}: {key}: {why}")
                values[name] = value
            elif key == "llm.prediction.structured" and f["value"] == {"type": "none"}:
                continue  # LM Studio writes it into every preset: no structured output, as here
            elif key in LMS_KNOWN or key.startswith(LMS_OTHER_RUNTIMES):
                notes.append(f"line {line}: {key} not taken: Hearth has no such setting")
            else:
                raise PresetError(f"line {line}: unknown setting {key!r}")
    title = obj.get("name")
    return ImportedPreset(values, "LM Studio preset", title if isinstance(title, str) else "", tuple(notes))


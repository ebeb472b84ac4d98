"""What a model's authors recommend for sampling, read from the model itself.

Two places carry it:
- a GGUF file's ``general.sampling.*`` keys (llama.cpp PR #17120), which llama-server applies as
  defaults under a request's own fields: ``temp``, ``top_k``, ``top_p``, ``min_p``,
  ``penalty_repeat``, ``penalty_last_n``, and some Hearth has no sampler for (``sequence``,
  ``xtc_*``, ``mirostat*``);
- a transformers folder's ``generation_config.json`` (a Hub download fetches it with the weights):
  ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``repetition_penalty``, ``max_new_tokens``;
  ``do_sample: false`` means greedy, as transformers reads it. The other keys (token ids, beams)
  are not sampling.

Each value is checked as SamplingParams checks it; one that does not pass, or that Hearth has no
sampler for, is left out with a note that says so. Only headers and a small JSON file are read.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import HearthError, ModelFileError
from ..types import SamplingParams

GGUF_PREFIX = "general.sampling."
# general.sampling.KEY -> SamplingParams field, and the type the key must hold
GGUF_KEYS: dict[str, tuple[str, type]] = {
    "temp": ("temperature", float), "top_k": ("top_k", int), "top_p": ("top_p", float),
    "min_p": ("min_p", float), "penalty_repeat": ("repeat_penalty", float), "penalty_last_n": ("penalty_last_n", int),
}
GGUF_UNUSED = {"sequence": "Hearth's samplers run in one fixed order", "xtc_probability": "Hearth has no XTC sampler",
               "xtc_threshold": "Hearth has no XTC sampler", "mirostat": "Hearth has no Mirostat sampler",
               "mirostat_tau": "Hearth has no Mirostat sampler", "mirostat_eta": "Hearth has no Mirostat sampler"}
GENERATION_CONFIG = "generation_config.json"
HF_KEYS: dict[str, tuple[str, type]] = {
    "temperature": ("temperature", float), "top_k": ("top_k", int), "top_p": ("top_p", float),
    "min_p": ("min_p", float), "repetition_penalty": ("repeat_penalty", float),
    "max_new_tokens": ("max_tokens", int),
}
MAX_CONFIG_BYTES = 1 << 20  # a generation_config.json is a few hundred bytes


@dataclass(frozen=True)
class Recommended:
    """The model's own sampling values (SamplingParams field names), where they were read
    (``source``, for the user: "the GGUF file's general.sampling keys"), and notes on what was left out."""
    values: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    notes: tuple[str, ...] = ()


NONE = Recommended()


def _checked(name: str, raw: Any, kind: type, where: str, notes: list[str]) -> Any | None:
    """``raw`` as a valid value of SamplingParams' ``name`` (None, and a note, when it is not)."""
    ok = isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw)
    if ok and kind is int and float(raw) != int(raw):
        ok = False
    if not ok:
        notes.append(f"{where} is {raw!r}, not a {'whole ' if kind is int else ''}number: left out")
        return None
    # A GGUF keeps floats in 32 bits: 0.6 reads back as 0.6000000238418579, which is 0.6 to its precision.
    value = int(raw) if kind is int else float(f"{float(raw):.7g}")
    try:
        SamplingParams(**{name: value})  # type: ignore[arg-type]  # one field, by name
    except HearthError as e:
        notes.append(f"{where} left out: {e}")
        return None
    return value


def from_gguf_metadata(metadata: dict[str, Any]) -> Recommended:
    """The ``general.sampling.*`` keys of a GGUF header's metadata."""
    values: dict[str, Any] = {}
    notes: list[str] = []
    for key in sorted(k for k in metadata if k.startswith(GGUF_PREFIX)):
        short = key[len(GGUF_PREFIX):]
        if short in GGUF_KEYS:
            name, kind = GGUF_KEYS[short]
            v = _checked(name, metadata[key], kind, key, notes)
            if v is not None:
                values[name] = v
        elif short in GGUF_UNUSED:
            notes.append(f"{key} not used: {GGUF_UNUSED[short]}")
        else:
            notes.append(f"{key} not used: Hearth does not know it")
    return Recommended(values, "the GGUF file's general.sampling keys", tuple(notes)) if values or notes else NONE


def from_gguf(path: str | Path) -> Recommended:
    """A GGUF file's recommendations (its header only is read)."""
    from .gguf_header import read_gguf

    return from_gguf_metadata(read_gguf(path, vocab=False).metadata)


def from_generation_config(folder: str | Path) -> Recommended:
    """A transformers folder's ``generation_config.json`` (NONE when it has none). A file that cannot be
    read is a note, not an error: the model still loads and runs with the other layers."""
    p = Path(folder) / GENERATION_CONFIG
    if not p.is_file():
        return NONE
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise ValueError(f"it is {p.stat().st_size:,} bytes, more than a generation config holds")
        config = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ValueError("it does not hold a JSON object")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return Recommended({}, GENERATION_CONFIG, (f"{GENERATION_CONFIG} cannot be read: {e}",))
    values: dict[str, Any] = {}
    notes: list[str] = []
    for key, (name, kind) in HF_KEYS.items():
        if config.get(key) is not None:
            v = _checked(name, config[key], kind, f"{GENERATION_CONFIG}'s {key}", notes)
            if v is not None:
                values[name] = v
    if config.get("do_sample") is False:
        values["temperature"] = 0.0  # transformers decodes greedily, whatever the temperature says
        notes.append(f"{GENERATION_CONFIG} has do_sample false: greedy (temperature 0), as transformers decodes")
    return Recommended(values, f"the model's {GENERATION_CONFIG}", tuple(notes)) if values or notes else NONE


def recommended(path: str | Path) -> Recommended:
    """The recommendations of a model on disk: a GGUF file's header, or a folder's generation config.
    A file that is not a readable GGUF recommends nothing (its load says what is wrong with it)."""
    p = Path(path)
    if p.is_dir():
        return from_generation_config(p)
    try:
        return from_gguf(p)
    except ModelFileError:
        return NONE

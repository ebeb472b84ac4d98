"""Each model's own settings, and the layers a reply's settings come from.

A reply's sampling is made of layers, each above the one before:

1. ``hearth``: Hearth's defaults (the engine's, as the user set them for every model);
2. ``model``: the model's own recommendations (GGUF ``general.sampling.*``, a folder's
   ``generation_config.json``: engine/models/recommended.py);
3. ``yours``: the user's settings for this model;
4. ``chat``: a chat's own settings (the window);
5. ``request``: an API request's fields.

:func:`layered` stacks them and says, for every value, which layer it came from (Settings shows it).
A model's own settings are kept by the model's content (its file's SHA-256, one over a folder's
files, a server's URL and id), so a renamed or moved file keeps them: model_store.py keeps them in
the config folder, where the window and ``engine models defaults`` both read and write them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..config import EXACTNESS
from ..errors import HearthError
from ..sizing.load_spec import KV_TYPES
from ..models.recommended import NONE, Recommended
from ..types import SamplingParams

# The sampling knobs a layer may set (stop strings and ignore_eos are the CLI's and the benchmarks').
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty",
                 "frequency_penalty", "penalty_last_n", "seed", "max_tokens", "reasoning_budget")
# The load settings a tuning bench row sets for its model ("Apply best"): speculation, CPU threads, GPU layers,
# the KV cache's type and the kernels' exactness. Absent: the window's own for every model.
TUNED_KEYS = ("draft", "n_threads", "gpu_layers", "kv_type", "exactness")
# What a model's own settings apply to its load (over the load settings for every model).
LOAD_KEYS = ("context",) + TUNED_KEYS
# A model's own settings besides sampling: stop strings, its system prompt, example messages every chat
# starts with (an Ollama Modelfile's MESSAGE lines), the Think control's default, the context it loads
# with, which MCP servers' tools it is offered (absent: every one), and its tuned load settings.
OTHER_KEYS = ("stop", "system_prompt", "messages", "think", "context", "tools") + TUNED_KEYS
MODEL_KEYS = SAMPLING_KEYS + OTHER_KEYS
# What a chat may set for itself (its system prompt and Think choice are kept on the chat already).
CHAT_KEYS = SAMPLING_KEYS + ("stop",)
LAYERS = ("hearth", "model", "yours", "chat", "request")
LAYER_LABELS = {"hearth": "Hearth's default", "model": "the model's recommendation", "yours": "yours for this model",
                "chat": "this chat's", "request": "the request's"}
CONTEXT_MIN, CONTEXT_MAX = 256, 1 << 20
MAX_SYSTEM_PROMPT = 200_000   # characters: a long persona is a few thousand
MAX_STOP = 16                 # stop strings, each at most MAX_STOP_CHARS
MAX_STOP_CHARS = 200
MAX_NAME = 200                # characters of a think choice or a tool server's name
MAX_MESSAGES = 64             # example messages, each at most MAX_SYSTEM_PROMPT characters
MESSAGE_ROLES = ("user", "assistant")
MAX_PATH = 4096               # characters of a draft model's path


def default_sampling() -> dict[str, Any]:
    """The engine's own value of every sampling knob (None: no seed, no reply length cap, no budget)."""
    d = SamplingParams()
    return {k: getattr(d, k) for k in SAMPLING_KEYS}


def budget_problem(v: Any) -> str | None:
    """Why ``v`` is not a thinking budget (None: unlimited, or a whole number of tokens >= 0)."""
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
        return None
    return f"reasoning_budget must be a whole number >= 0 or empty (no limit), got {v!r}"


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def value_problem(key: str, v: Any) -> str | None:
    """Why ``v`` cannot be the value of ``key`` in a model's or a chat's settings (None: it can)."""
    if key not in MODEL_KEYS:
        return f"{key!r} is not a setting (settings: {', '.join(MODEL_KEYS)})"
    if key == "reasoning_budget":
        return budget_problem(v)
    if key in SAMPLING_KEYS:
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return f"{key} must be a number, got {v!r}"
        if key in ("top_k", "penalty_last_n", "seed", "max_tokens") and v is not None and not _whole(v):
            return f"{key} must be a whole number, got {v!r}"
        if v is None and key not in ("seed", "max_tokens"):
            return f"{key} must be a number, got nothing"
        try:
            SamplingParams(**{key: v})  # type: ignore[arg-type]  # one field, by name
        except (HearthError, TypeError) as e:
            return str(e)
        return None
    if key == "stop":
        if not isinstance(v, list) or len(v) > MAX_STOP or not all(
                isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in v):
            return f"stop must be a list of at most {MAX_STOP} strings of 1 to {MAX_STOP_CHARS} characters"
        return None
    if key == "system_prompt":
        if not isinstance(v, str) or len(v) > MAX_SYSTEM_PROMPT:
            return f"system_prompt must be text of at most {MAX_SYSTEM_PROMPT:,} characters"
        return None
    if key == "messages":
        if not isinstance(v, list) or len(v) > MAX_MESSAGES or not all(
                isinstance(m, dict) and set(m) == {"role", "content"} and m["role"] in MESSAGE_ROLES
                and isinstance(m["content"], str) and len(m["content"]) <= MAX_SYSTEM_PROMPT for m in v):
            return (f"messages must be a list of at most {MAX_MESSAGES} examples, each a role (user or assistant) "
                    "and its text")
        return None
    if key == "think":
        if v is not None and not isinstance(v, bool) and not (isinstance(v, str) and 0 < len(v) <= MAX_NAME):
            return f"think must be on, off, a level the model's Think control offers, or empty, got {v!r}"
        return None
    if key == "context":
        if not _whole(v) or not CONTEXT_MIN <= v <= CONTEXT_MAX:
            return f"context must be a whole number from {CONTEXT_MIN} to {CONTEXT_MAX}, got {v!r}"
        return None
    if key in TUNED_KEYS:
        return _load_problem(key, v)
    # tools: the MCP servers whose tools this model is offered
    if not isinstance(v, list) or not all(isinstance(s, str) and 0 < len(s) <= MAX_NAME for s in v):
        return "tools must be a list of MCP server names"
    return None


def _load_problem(key: str, v: Any) -> str | None:
    """Why ``v`` cannot be the tuned load setting ``key``. A draft's file is only checked for its name here:
    a draft deleted since is the load's clear error, and the model's other settings are kept."""
    if key == "draft":
        ok = v in ("auto", "none") or (isinstance(v, str) and v.lower().endswith(".gguf") and len(v) <= MAX_PATH)
        return None if ok else f"draft must be auto, none or a draft model's .gguf file, got {v!r}"
    if key == "n_threads":
        return None if _whole(v) and v >= 1 else f"n_threads must be a whole number from 1, got {v!r}"
    if key == "gpu_layers":
        return None if v == "all" or (_whole(v) and v >= 0) else \
            f"gpu_layers must be all or a whole number from 0, got {v!r}"
    allowed = KV_TYPES if key == "kv_type" else EXACTNESS
    return None if v in allowed else f"{key} must be one of {', '.join(allowed)}, got {v!r}"


def values_problem(values: Any, keys: tuple[str, ...] = MODEL_KEYS) -> str | None:
    """Why ``values`` is not a set of settings among ``keys`` (the first problem), or None."""
    if not isinstance(values, dict):
        return "the settings must be an object"
    for k, v in values.items():
        if k not in keys:
            return f"{k!r} is not a setting here (settings: {', '.join(keys)})"
        why = value_problem(k, v)
        if why:
            return why
    return None


def parse_value(key: str, text: str) -> Any:
    """A setting's value as typed in a terminal (``--set key=value``): "none" or nothing for no value,
    "on"/"off" for a switch, numbers as numbers, stop strings and tool servers separated by commas.
    Raises HearthError naming the setting."""
    if key not in MODEL_KEYS:
        raise HearthError(f"{key!r} is not a setting (settings: {', '.join(MODEL_KEYS)})")
    t = text.strip()
    if key in ("system_prompt",):
        value: Any = text
    elif key in ("draft", "kv_type", "exactness") or (key == "gpu_layers" and t.lower() == "all"):
        # "auto" and "none" are values of these, not "no value"; a draft's path keeps its case
        value = t if key == "draft" and t.lower() not in ("auto", "none") else t.lower()
    elif key in ("stop", "tools"):
        value = [s for s in (p.strip() for p in text.split(",")) if s]
    elif t.lower() in ("", "none", "null", "auto"):
        value = None
    elif key == "think":
        value = {"on": True, "true": True, "off": False, "false": False}.get(t.lower(), t)
    else:
        try:
            value = int(t) if key in ("top_k", "penalty_last_n", "seed", "max_tokens", "reasoning_budget",
                                      "context", "n_threads", "gpu_layers") else float(t)
        except ValueError:
            raise HearthError(f"{key}: {t!r} is not a number") from None
    why = value_problem(key, value)
    if why:
        raise HearthError(why)
    return value


@dataclass(frozen=True)
class Layered:
    """Settings stacked from their layers: each value, and the layer (one of LAYERS) it came from;
    ``notes``: what a layer held that was left out (a recommendation Hearth has no sampler for)."""
    values: dict[str, Any]
    layers: dict[str, str]
    notes: tuple[str, ...] = ()
    source: dict[str, str] = field(default_factory=dict)  # layer -> where it was read ("the model's ...")

    def params(self, **fixed: Any) -> SamplingParams:
        """The SamplingParams these values make, with ``fixed`` fields (a grammar, stop strings) on top."""
        s = {k: self.values[k] for k in SAMPLING_KEYS if k in self.values}
        if s.get("reasoning_budget") is None:
            s.pop("reasoning_budget", None)
        if self.values.get("stop"):
            s["stop"] = tuple(self.values["stop"])
        return SamplingParams(**{**s, **fixed})

    def label(self, key: str) -> str:
        """Where ``key``'s value comes from, in words ("the model's recommendation")."""
        return LAYER_LABELS.get(self.layers.get(key, "hearth"), "")

    def describe(self) -> dict[str, Any]:
        """Plain data for an API card or a terminal: {key: {"value": v, "layer": layer}} and the notes."""
        out: dict[str, Any] = {k: {"value": v, "layer": self.layers[k]} for k, v in self.values.items()}
        return {"settings": out, "notes": list(self.notes), "sources": dict(self.source)}


def layered(hearth: Mapping[str, Any] | None = None, model: Recommended = NONE,
            yours: Mapping[str, Any] | None = None, chat: Mapping[str, Any] | None = None,
            request: Mapping[str, Any] | None = None) -> Layered:
    """The layers stacked (see the module's docstring). ``hearth``: the user's defaults for every model
    (missing knobs: the engine's). A layer's value that does not validate is left out with a note: a
    settings file edited by hand must not stop a reply."""
    values: dict[str, Any] = {}
    layers: dict[str, str] = {}
    notes: list[str] = list(model.notes)
    base = {**default_sampling(), **(hearth or {})}
    stack = (("hearth", base), ("model", model.values), ("yours", yours or {}), ("chat", chat or {}),
             ("request", request or {}))
    for name, layer in stack:
        for k, v in layer.items():
            why = value_problem(k, v)
            if why:
                notes.append(f"{LAYER_LABELS[name]} {k} left out: {why}")
                continue
            values[k], layers[k] = v, name
    source = {"model": model.source} if model.source else {}
    return Layered(values, layers, tuple(notes), source)


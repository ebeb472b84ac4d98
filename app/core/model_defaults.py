"""The window's side of each model's own settings. Qt-free.

A reply's settings are layers (engine/library/model_settings.py): Hearth's defaults (Settings →
Sampling, for every model) < the model's own recommendations < the user's settings for this model <
the chat's own. The loaded model is known by its identity (:class:`ModelIdentity`), found on the engine
thread when it loads (its file is hashed once, memoised in the prefix store's folder); the user's
settings for it are ``Settings.models[identity.key]``, kept in model-settings.json beside settings.json.

Besides sampling a model's own settings hold its system prompt (used by a chat whose own is empty), example
turns every chat starts with, the Think control's default, the context it loads with, which MCP
servers' tools it is offered, and the load settings "Apply best" (the tuning bench) chose for it: they
apply over the load settings for every model whenever it loads (:func:`with_model_load`), and "Roll back"
gives back what they replaced (app/core/tuning_records.py keeps the record).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.library import (CHAT_KEYS, LOAD_KEYS, NO_RECOMMENDATION, TUNED_KEYS, Layered, ModelEntry, Recommended,
                            layered, memo_dir, settings_for_model, values_problem)
from engine.loading import LoadRequest

from app.core.settings import Settings, SettingsError
from app.core.tuning_records import moved


@dataclass(frozen=True)
class ModelIdentity:
    """A model as its settings know it: its key (None: not known, a Hub model not downloaded), the name
    its settings are shown under, and what it recommends."""
    key: str | None
    name: str
    recommended: Recommended = NO_RECOMMENDATION


NO_MODEL = ModelIdentity(None, "")


def identify(req: LoadRequest, data_dir: Path) -> ModelIdentity:
    """``req``'s model's identity. May hash the model file the first time: call it off the GUI thread."""
    got = settings_for_model(req.model_source, req.model, {}, memo_dir(data_dir))
    return ModelIdentity(got.key, got.name, got.recommended)


def yours(settings: Settings, ident: ModelIdentity) -> dict[str, Any]:
    """The user's own settings for the model (empty: none, or a model not identified)."""
    entry = settings.models.get(ident.key) if ident.key is not None else None
    return dict(entry.values) if entry is not None else {}


def reply_layers(settings: Settings, ident: ModelIdentity, chat: dict[str, Any] | None = None) -> Layered:
    """A reply's settings in the window: Hearth's defaults (the Sampling tab), the model's, yours, ``chat``."""
    return layered(settings.sampling, ident.recommended, yours(settings, ident), chat)


def with_yours(settings: Settings, ident: ModelIdentity, values: dict[str, Any]) -> Settings:
    """``settings`` with ``values`` as the user's settings for the model (none: its entry goes). Raises
    SettingsError naming the value that is wrong."""
    if ident.key is None:
        raise SettingsError("models: the model is not identified yet (it is loading or not downloaded)")
    why = values_problem(values)
    if why:
        raise SettingsError(f"models: {why}")
    models = dict(settings.models)
    if values:
        models[ident.key] = ModelEntry(ident.name, dict(values))
    else:
        models.pop(ident.key, None)
    return replace(settings, models=models)


def chat_problem(values: dict[str, Any]) -> str | None:
    """Why ``values`` cannot be a chat's own settings (None: they can)."""
    return values_problem(values, CHAT_KEYS)


def own_load(models: dict[str, ModelEntry], ident: ModelIdentity) -> dict[str, Any]:
    """The model's own load settings (its context, what "Apply best" chose; ``models``: Settings.models)."""
    entry = models.get(ident.key) if ident.key is not None else None
    return {k: v for k, v in entry.values.items() if k in LOAD_KEYS} if entry is not None else {}


def with_model_load(req: LoadRequest, models: dict[str, ModelEntry], ident: ModelIdentity) -> LoadRequest:
    """``req`` with the model's own load settings (its context and tuned settings; ``models``:
    Settings.models) over the ones for every model."""
    own = own_load(models, ident)
    return replace(req, **own) if own else req


def own_load_note(own: dict[str, Any]) -> str:
    """What a failed load's message adds when the model's own load settings were in it (the window goes back
    to the model set-up that last worked, which they are not part of), so the user knows where they live."""
    if not own:
        return ""
    said = ", ".join(f"{k} {v}" for k, v in own.items())
    return (f" It loaded with this model's own load settings ({said}): Settings → Sampling, This model, changes "
            "or clears them (Performance → Benchmark this model → Roll back undoes \"Apply best\").")


def model_load(settings: Settings, ident: ModelIdentity) -> LoadRequest:
    """How the model ``ident`` loads with ``settings``: the load settings with its own over them."""
    return with_model_load(settings.load_request(), settings.models, ident)


def load_changed(old: Settings, new: Settings, ident: ModelIdentity) -> bool:
    """Whether going from ``old`` to ``new`` changes how the loaded model ``ident`` loads (its own load
    settings included: a per-model context or "Apply best" reloads it too)."""
    return model_load(old, ident) != model_load(new, ident)


def is_tuned(settings: Settings, ident: ModelIdentity) -> bool:
    """Whether "Apply best" set load settings for the model that "Roll back" can undo."""
    return ident.key is not None and ident.key in settings.tuning


def apply_tuning(settings: Settings, ident: ModelIdentity, config: dict[str, Any]) -> Settings:
    """``settings`` with ``config`` (a benchmark row's load settings) as the model's own; what it replaces
    is recorded so :func:`roll_back_tuning` can restore it. A second apply keeps what was there before
    the first. Raises SettingsError naming what is wrong."""
    unknown = set(config) - set(TUNED_KEYS)
    if unknown:
        raise SettingsError(f"tuning: {sorted(unknown)[0]!r} is not a setting a benchmark row can apply")
    if ident.key is None:
        raise SettingsError("tuning: the model is not identified yet (it is loading or not downloaded)")
    own = yours(settings, ident)
    earlier = settings.tuning.get(ident.key, {"applied": {}, "previous": {}})
    previous = {**{k: own[k] for k in config if k in own and k not in earlier["applied"]}, **earlier["previous"]}
    record = {"applied": {**earlier["applied"], **config}, "previous": previous}
    tuned = with_yours(settings, ident, {**own, **config})
    return replace(tuned, tuning={**settings.tuning, ident.key: record}).validate()


def roll_back_tuning(settings: Settings, ident: ModelIdentity) -> Settings:
    """``settings`` with the model's own load settings from before "Apply best" (one it had none of goes)."""
    record = settings.tuning.get(ident.key) if ident.key is not None else None
    if record is None:
        raise SettingsError("tuning: nothing was applied to this model, so there is nothing to roll back")
    own = {k: v for k, v in yours(settings, ident).items() if k not in record["applied"]}
    back = with_yours(settings, ident, {**own, **record["previous"]})
    return replace(back, tuning={k: t for k, t in settings.tuning.items() if k != ident.key}).validate()


def settle_tuning(settings: Settings, ident: ModelIdentity) -> Settings:
    """``settings`` with the "Apply best" record kept by the path of the model it loaded (a settings file
    from before version 4) moved to the model's key, now that the model is identified."""
    if ident.key is None or settings.model not in settings.tuning_by_path:
        return settings
    return moved(settings, settings.model, ident.key, ident.name)


def system_prompt(chat_prompt: str, settings: Settings, ident: ModelIdentity) -> str:
    """A reply's system prompt: the chat's own, or (when the chat has none) the model's."""
    return chat_prompt if chat_prompt.strip() else str(yours(settings, ident).get("system_prompt") or "")


def example_turns(settings: Settings, ident: ModelIdentity) -> list[dict[str, str]]:
    """The model's example turns every chat starts with (an Ollama Modelfile's MESSAGE lines)."""
    return list(yours(settings, ident).get("messages") or [])


def think_default(settings: Settings, ident: ModelIdentity) -> object:
    """The Think control's choice for a chat that made none (None: the template's own default)."""
    return yours(settings, ident).get("think")


def offered_servers(settings: Settings, ident: ModelIdentity) -> list[str] | None:
    """The MCP servers whose tools the model is offered (None: every one)."""
    tools = yours(settings, ident).get("tools")
    return list(tools) if tools is not None else None

"""What "Apply best" (the tuning bench) set for each model, and what it replaced. Qt-free.

A benchmark row's load settings become the model's own settings (``Settings.models``, by the model's
content: a renamed or moved file keeps them; app/core/model_defaults.py applies and rolls them back), and
``Settings.tuning[key]`` keeps the record: ``applied``, what "Apply best" set, and ``previous``, the model's
own values it replaced (a key absent there had none, so "Roll back" removes it).

Before version 4 of the settings file "Apply best" changed the load settings for every model and kept its
record by the model's path; such records wait in ``Settings.tuning_by_path`` until the model is known by
its content (its hash memoised when the settings load, or the model identified when it loads). Then
:func:`settled` moves each: its values become the model's own, and a setting for every model that still
holds the applied value goes back to the one it replaced, so another model no longer loads with it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Protocol, TypeVar

from engine import HearthError
from engine.library import TUNED_KEYS, ModelEntry, memo_dir, model_key, model_path
from engine.loading import infer_source


class Tuned(Protocol):
    """What of the window's Settings the records read (settings.py imports this module: no circle back)."""
    tuning: dict
    tuning_by_path: dict
    models: dict

    def validate(self) -> Any: ...


S = TypeVar("S", bound=Tuned)

Record = dict[str, dict[str, Any]]  # {"applied": {...}, "previous": {...}}
Known = Callable[[str], "tuple[str, str] | None"]  # a model string -> its key and name, or None: not known now


def invalid_records(records: Any) -> bool:
    """Whether ``records`` is not a map of model -> Record over TUNED_KEYS."""
    return not isinstance(records, dict) or not all(
        isinstance(m, str) and isinstance(t, dict) and set(t) == {"applied", "previous"} and all(
            isinstance(t[k], dict) and set(t[k]) <= set(TUNED_KEYS) for k in t)
        for m, t in records.items())


def moved(s: S, path: str, key: str, name: str) -> S:
    """``s`` with the record kept for the model at ``path`` moved to its key ``key`` (``name``: what the model
    is called, for a new entry). A value set for the model since stays; nothing is lost."""
    old = s.tuning_by_path[path]
    entry = s.models.get(key)
    own = dict(entry.values) if entry is not None else {}
    taken = {k: v for k, v in old["applied"].items() if k not in own}
    rec = s.tuning.get(key, {"applied": {}, "previous": {}})
    rec = {"applied": {**rec["applied"], **taken}, "previous": dict(rec["previous"])}
    models = dict(s.models)
    if taken:
        models[key] = ModelEntry(entry.name if entry is not None else name, {**own, **taken})
    tuning = {**s.tuning, key: rec} if rec["applied"] else dict(s.tuning)
    by_path = {p: t for p, t in s.tuning_by_path.items() if p != path}
    out = replace(s, tuning=tuning, tuning_by_path=by_path, models=models)
    restored = {k: old["previous"][k] for k, v in old["applied"].items()
                if k in old["previous"] and getattr(s, k) == v}
    try:
        return replace(out, **restored).validate()
    except ValueError:  # what it replaced no longer validates (a draft file deleted since): kept as it is
        return out


def settled(s: S, known: Known) -> S:
    """``s`` with every path-keyed record whose model ``known`` knows moved to the model's key (the newest
    first: its ``previous`` may hold what an older one applied, which that one's move then restores)."""
    for path in reversed(list(s.tuning_by_path)):
        got = known(path)
        if got is not None:
            s = moved(s, path, *got)
    return s


def memoised(data_dir: Any) -> Known:
    """A ``known`` that reads only the memoised hashes in ``data_dir`` (never a model file)."""
    memo = memo_dir(data_dir)

    def known(model: str) -> tuple[str, str] | None:
        source = infer_source(model)
        key = model_key(source, model, memo, memo_only=True)
        if key is None:
            return None
        try:
            path = model_path(source, model)
        except (OSError, HearthError):
            path = None
        return key, path.name if path is not None and source != "hub" else model

    return known

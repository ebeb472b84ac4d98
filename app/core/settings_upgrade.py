"""Settings files written by older versions, and sampling knobs a file got wrong. Qt-free.

Versions of settings.json (app/core/settings.py writes FORMAT_VERSION):
- 1: the first.
- 2: the exactness profile's default became "fast" (engine/config.py DEFAULT_EXACTNESS).
- 3: a reply's length has no cap by default: it ends when the model stops or the context is full.
- 4: "Apply best" sets a model's own load settings, kept by the model's content; the records of what it
  applied, kept by the model's path, wait in ``tuning_by_path`` (app/core/tuning_records.py moves them).
Every version saved every field, so a value equal to the old default was the default, not a choice.
"""
from __future__ import annotations

from typing import Any

from engine import HearthError, SamplingParams
from engine.library import SAMPLING_KEYS, budget_problem, default_sampling

OLD_MAX_TOKENS = 512  # the reply length cap before version 3, written into every file


def upgraded(raw: dict[str, Any]) -> dict[str, Any]:
    """A settings file's dict as this version reads it: version 1's "exact" profile (unless "Apply best"
    chose it) and version 2's reply length cap of 512 tokens become the new defaults; version 3's "Apply best"
    records, kept by the model's path, move to ``tuning_by_path``; every other value is kept as it was."""
    version = raw.get("version", 1) if isinstance(raw.get("version", 1), int) else 1
    tuning = raw.get("tuning") if isinstance(raw.get("tuning"), dict) else {}
    applied = any(isinstance(t, dict) and "exactness" in (t.get("applied") or {}) for t in tuning.values())
    out = dict(raw)
    if version < 2 and raw.get("exactness") == "exact" and not applied:
        del out["exactness"]
    sampling = raw.get("sampling")
    if version < 3 and isinstance(sampling, dict) and sampling.get("max_tokens") == OLD_MAX_TOKENS:
        out["sampling"] = {k: v for k, v in sampling.items() if k != "max_tokens"}
    if version < 4 and "tuning" in raw:
        out["tuning_by_path"], out["tuning"] = raw["tuning"], {}
    return out


def valid_sampling(raw: Any, problems: list[str]) -> dict[str, Any]:
    """The default sampling knobs with each valid one from ``raw`` applied (one message in ``problems``
    per knob left out)."""
    out = default_sampling()
    if not isinstance(raw, dict):
        problems.append("sampling: must be an object")
        return out
    for k, v in raw.items():
        if k not in SAMPLING_KEYS:
            problems.append(f"sampling: unknown setting {k!r}")
            continue
        why = budget_problem(v) if k == "reasoning_budget" else None
        try:
            if why is None and not (k == "reasoning_budget" and v is None):
                SamplingParams(**{k: v})
        except (HearthError, TypeError) as e:
            why = str(e)
        if why:
            problems.append(f"sampling: {why}")
            continue
        out[k] = v
    return out

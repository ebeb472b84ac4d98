"""The system-prompt presets a new Hearth starts with, and how a settings file's list is salvaged. Qt-free."""
from __future__ import annotations

from typing import Any

DEFAULT_PRESETS = (
    {"name": "None", "prompt": ""},
    {"name": "Helpful assistant", "prompt": "You are a helpful, concise assistant."},
    {"name": "Programmer", "prompt": "You are an expert programmer. Answer with short explanations "
                                     "and put code in fenced Markdown code blocks."},
    {"name": "Translator", "prompt": "Translate the user's text into English. Reply with the "
                                     "translation only."},
)


def valid_presets(raw: Any, problems: list[str]) -> Any:
    """The presets in ``raw`` that have a name and a prompt, each name once; ``raw`` as it
    is when it is not a list (validate() then says so and the defaults are used)."""
    if not isinstance(raw, list):
        return raw
    out: list[dict[str, str]] = []
    for p in raw:
        ok = isinstance(p, dict) and isinstance(p.get("name"), str) and p["name"].strip() \
            and isinstance(p.get("prompt"), str)
        if not ok or any(q["name"] == p["name"] for q in out):
            problems.append(f"presets: left out {p!r} (a preset needs a new, non-empty name and a prompt text)")
            continue
        out.append({"name": p["name"], "prompt": p["prompt"]})
    return out or [dict(p) for p in DEFAULT_PRESETS]

"""Where each model's own settings are kept: ``model-settings.json`` in the config folder, beside the
window's settings.json, keyed by the model's content.

The window (app/core/settings.py loads and saves it with its settings) and ``engine models defaults``
read and write the same file. Writes are atomic. A file that cannot be read is moved aside and the
message says where; an entry that does not validate is left out with a message and the others kept,
and the original is moved aside as a backup before anything is written over it.

A model's key: the SHA-256 of its GGUF file (the bundled one too), one over a transformers folder's
config and weights (engine/models/digest.py), or ``remote:URL#id`` for a server's model. Hashes are
memoised by path, size and mtime in the prefix store's folder, where a load hashes the file anyway,
so a model is hashed once per version; :func:`model_key` with ``memo_only`` never reads a model.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import atomic_write, move_aside
from ..errors import HearthError
from .model_settings import values_problem

FILE_NAME = "model-settings.json"
FORMAT_VERSION = 1
MAX_FILE_BYTES = 16 << 20
REMOTE = "remote:"


@dataclass
class ModelEntry:
    """One model's settings: ``values`` (model_settings.MODEL_KEYS), and ``name``, what the model was
    called when they were last saved (for people reading the file and ``engine models defaults``)."""
    name: str
    values: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "values": dict(self.values)}


def memo_dir(data_dir: Path) -> Path:
    """Where model hashes are memoised: the prefix store's folder, which a load's hashing fills."""
    from ..sizing.load_plan import prefix_store_dir

    return prefix_store_dir(data_dir)


def model_path(source: str, model: str) -> Path | None:
    """The file or folder on disk a model string names (None: a server's model, or a Hub id not downloaded)."""
    from ..models.catalogue import bundled_model_path

    if source == "remote":
        return None
    if source == "bundled":
        return bundled_model_path()
    if source == "hub":
        from ..models.hub import cached_model

        return cached_model(model)
    p = Path(model).expanduser()
    return p if p.exists() else None


def model_key(source: str, model: str, memo: Path | None, *, memo_only: bool = False) -> str | None:
    """The key a model's settings are kept under (see the module's docstring); None when it cannot be
    known now (a Hub id not downloaded, a file missing, or with ``memo_only`` one not hashed yet)."""
    from ..models.digest import file_sha256, folder_sha256, memoised_sha256

    if source == "remote":
        return REMOTE + model
    try:
        path = model_path(source, model)
        if path is None:
            return None
        if path.is_dir():
            return folder_sha256(path, memo, memo_only=memo_only)
        if memo_only:
            return memoised_sha256(path.resolve(), memo) if memo is not None else None
        return file_sha256(path.resolve(), memo_dir=memo)
    except (OSError, HearthError):
        return None


def _entries(raw: Any, problems: list[str]) -> dict[str, ModelEntry]:
    models = raw.get("models", {}) if isinstance(raw, dict) else None
    if not isinstance(models, dict):
        problems.append("models: must be an object")
        return {}
    out: dict[str, ModelEntry] = {}
    for key, e in models.items():
        name = e.get("name") if isinstance(e, dict) else None
        why = values_problem(e.get("values")) if isinstance(e, dict) else "must be an object"
        if not isinstance(name, str):
            why = why or "its name must be text"
            name = key
        if why:
            problems.append(f"{name}: {why}")
            continue
        out[str(key)] = ModelEntry(name, dict(e["values"]))
    return out


class ModelStore:
    """Reads and writes ``model-settings.json`` (default: in the config folder)."""

    def __init__(self, path: Path | str | None = None) -> None:
        if path is None:
            from ..paths import config_dir

            path = config_dir() / FILE_NAME
        self.path = Path(path)

    def load(self) -> tuple[dict[str, ModelEntry], str | None]:
        """Every model's entry, and a message for the user (None when all went well). A missing file is
        no entry; a damaged one is moved aside (the message says where), as are the entries that do not
        validate (the others are kept)."""
        if not self.path.exists():
            return {}, None
        try:
            if self.path.stat().st_size > MAX_FILE_BYTES:
                raise ValueError(f"it is {self.path.stat().st_size:,} bytes, more than settings hold")
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise ValueError("it does not hold a settings object")
        except (OSError, UnicodeDecodeError, ValueError) as e:
            moved = move_aside(self.path, "invalid")
            return {}, (f"Each model's own settings could not be read ({e}), so none are used. The file was "
                        f"kept as {moved}.")
        problems: list[str] = []
        entries = _entries(raw, problems)
        if not problems:
            return entries, None
        moved = move_aside(self.path, "invalid")
        return entries, (f"Some models' own settings could not be used: {'; '.join(problems)}. The others were "
                         f"kept; the original file was kept as {moved}.")

    def save(self, entries: dict[str, ModelEntry]) -> None:
        """Write every entry (each is checked first: a bad one raises HearthError and nothing is written)."""
        for key, e in entries.items():
            why = values_problem(e.values)
            if why:
                raise HearthError(f"{e.name or key}: {why}")
        data = {"version": FORMAT_VERSION, "models": {k: e.as_dict() for k, e in sorted(entries.items())}}
        atomic_write(self.path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")

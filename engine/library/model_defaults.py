"""One model's settings as every caller asks for them: ``engine chat``, ``engine models defaults``, the
server's requests and ``GET /v1/models/{id}``, and the window (through app/core/model_defaults.py).

:func:`model_settings` finds what the model recommends and what the user set for it (model_store.py,
by the model's content); :meth:`ModelSettings.layered` stacks them over Hearth's defaults and under a
chat's and a request's own values (model_settings.py says the order).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import HearthError
from ..models.recommended import NONE, Recommended, recommended
from .model_settings import Layered, layered
from .model_store import ModelEntry, ModelStore, model_key, model_path


@dataclass(frozen=True)
class ModelSettings:
    """What one model brings to its layers: its key (None: not known yet), what it recommends, and the
    user's settings for it."""
    key: str | None
    name: str
    recommended: Recommended = NONE
    yours: dict[str, Any] = field(default_factory=dict)

    def layered(self, hearth: Mapping[str, Any] | None = None, chat: Mapping[str, Any] | None = None,
                request: Mapping[str, Any] | None = None) -> Layered:
        """The layers stacked: Hearth's defaults (``hearth``), the model's, the user's, ``chat``, ``request``."""
        return layered(hearth, self.recommended, self.yours, chat, request)


def model_settings(source: str, model: str, entries: Mapping[str, ModelEntry], memo: Path | None, *,
                   memo_only: bool = False) -> ModelSettings:
    """``model``'s settings: its key (hashing the file when it was not hashed before, unless ``memo_only``),
    its recommendations (a GGUF header or a folder's generation_config.json) and the user's entry."""
    key = model_key(source, model, memo, memo_only=memo_only)
    try:
        path = model_path(source, model)
    except (OSError, HearthError):  # a missing bundled model: its load says so
        path = None
    rec = recommended(path) if path is not None else NONE
    entry = entries.get(key) if key is not None else None
    name = path.name if path is not None and source != "hub" else model
    return ModelSettings(key, name, rec, dict(entry.values) if entry is not None else {})


def source_of(model: str) -> str:
    """A model string's source, as LoadSpec works it out (a path, a folder, a Hub id, a server's model)."""
    from ..sizing.load_spec import infer_source

    return infer_source(model)


class ServedDefaults:
    """What a server gives a request that leaves a setting out, per model: the layers under the request's
    (Hearth's defaults, the model's recommendations, the user's settings for it), computed once per model
    and again after :meth:`changed`. ``hearth`` gives the defaults for every model (the window's Sampling
    settings; ``engine serve``: the engine's own); ``entries`` the user's settings per model."""

    def __init__(self, hearth: Callable[[], Mapping[str, Any]] | None = None,
                 entries: Callable[[], Mapping[str, ModelEntry]] | None = None, memo: Path | None = None) -> None:
        self._hearth = hearth or dict
        self._entries = entries or (lambda: ModelStore().load()[0])
        self._memo = memo
        self._lock = threading.Lock()
        self._cache: dict[str, ModelSettings] = {}

    def changed(self) -> None:
        """The settings changed (the window's Settings, a model's import): read them again."""
        with self._lock:
            self._cache.clear()

    def settings(self, model: str, *, memo_only: bool = False) -> ModelSettings:
        """The settings of the model at ``model`` (a path as the engine describes it, or a model string).
        Reads a header and may hash a file the first time (unless ``memo_only``): call it off the event loop."""
        with self._lock:
            got = self._cache.get(model)
        if got is None:
            got = model_settings(source_of(model), model, self._entries(), self._memo, memo_only=memo_only)
            if got.key is not None or not memo_only:  # a key not known yet may be known next time
                with self._lock:
                    self._cache[model] = got
        return got

    def for_path(self, model: str, *, memo_only: bool = False) -> Layered:
        """The layers under a request for the model at ``model`` (see :meth:`settings`)."""
        return self.settings(model, memo_only=memo_only).layered(self._hearth())

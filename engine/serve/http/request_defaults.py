"""A request's settings: what it leaves out comes from its model's own settings.

As llama-server applies a GGUF's ``general.sampling`` keys under a request's fields and Ollama a
Modelfile's PARAMETERs, a request that leaves out temperature, top-p, max tokens (...) gets the
model's values: Hearth's defaults, the model's recommendations, the user's settings for the model
(engine/library/model_defaults.py), in that order, the request's own fields on top. Anthropic's
Messages API requires max_tokens, so there the request's is always used.

``GET /v1/models/{id}`` shows each of those values and the layer it came from.
"""
from __future__ import annotations

from typing import Any

import anyio

from ...library.model_defaults import ServedDefaults
from ...library.model_settings import SAMPLING_KEYS, Layered
from ...types import SamplingParams
from ..protocols.openai import ApiRequest
from ..runtime.targets import Target


def sampling_for(req: ApiRequest, base: Layered | None) -> SamplingParams:
    """The request's SamplingParams: its own fields over ``base`` (its model's layers; None: the engine's
    defaults). A stop list of its own replaces the model's; an empty one leaves the model's."""
    values: dict[str, Any] = {k: base.values[k] for k in SAMPLING_KEYS if base is not None and k in base.values}
    if values.get("reasoning_budget") is None:
        values.pop("reasoning_budget", None)
    own = dict(req.sampling)
    stop = own.pop("stop", ())
    values.update(own)
    if req.max_tokens is not None:
        values["max_tokens"] = req.max_tokens
    values["stop"] = tuple(stop) if stop else tuple(base.values.get("stop") or ()) if base is not None else ()
    return SamplingParams(**values)


class RequestDefaults:
    """The model layers of the server's models (``served``; None: the engine's defaults only), found off the
    event loop and kept per model until :meth:`changed`."""

    def __init__(self, served: ServedDefaults | None = None) -> None:
        self.served = served
        self._paths: dict[tuple[str, int], str] = {}  # (model id, scheduler) -> its file, as the engine says

    def changed(self) -> None:
        """The settings changed: the next request reads them again."""
        if self.served is not None:
            self.served.changed()

    def _path(self, t: Target) -> str:
        key = (t.model_id, id(t.scheduler))
        if key not in self._paths:
            self._paths[key] = t.scheduler.engine.describe().path or t.model_id
        return self._paths[key]

    async def base(self, t: Target) -> Layered | None:
        """``t``'s model's layers under a request (may read its header or hash it, on a worker thread)."""
        served = self.served
        if served is None:
            return None
        return await anyio.to_thread.run_sync(lambda: served.for_path(self._path(t)))

    async def card(self, card: dict[str, Any], t: Target | None, model: str | None) -> dict[str, Any]:
        """``card`` with ``hearth_settings``: each setting a request may leave out, its value and its layer.
        ``t``: the model when it is loaded; else ``model``, its file (a model never loaded is not hashed for
        this: until it is, the user's own settings for it are not known, and the card says so)."""
        served = self.served
        if served is None or (t is None and model is None):
            return card

        def layers() -> Layered:
            if t is not None:
                return served.for_path(self._path(t))
            assert model is not None
            return served.for_path(model, memo_only=True)
        got = await anyio.to_thread.run_sync(layers)
        out = got.describe()
        if t is None and served.settings(model or "", memo_only=True).key is None:
            out["notes"].append("this model's own settings are found once it has been loaded")
        return {**card, "hearth_settings": out}

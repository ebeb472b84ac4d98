"""What the local server serves: its own model, and with a pool any model of the library.

The server's own model is the scheduler attached to it (the window's model, or
``engine serve``'s). A request naming another model gets it from the pool
(pool.py), which loads it on a worker thread while the event loop stays free;
the request holds it (a lease) until its reply ends, so it is never unloaded
under a reply.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ...interface import ModelInfo
from ...models.catalogue import ModelRef
from ...reply_formats import ThinkControl
from ..protocols.openai import ApiError
from .pool import Held, ModelPool
from .scheduler import Scheduler


def file_model_id(path: str | Path) -> str:
    """A model file's or folder's API id: its name, without ``.gguf``."""
    name = Path(path).name
    return name[:-5] if name.lower().endswith(".gguf") else name


def api_model_id(ref: ModelRef | None) -> str:
    """The name clients put in ``model``: a GGUF's file name without ``.gguf``, a
    folder's name, or the Hub id as typed."""
    if ref is None:
        return "model"
    if ref.kind == "hub":
        return ref.label
    return file_model_id(ref.path)


def loaded_model_id(model: ModelInfo) -> str:
    """The API id of a loaded model: its file's or folder's name (``api_model_id`` of its file)."""
    return file_model_id(model.path) if model.path else "model"


@dataclass(slots=True, frozen=True)
class Target:
    """A model the server serves: its scheduler and the name clients call it by."""
    scheduler: Scheduler
    model_id: str
    n_ctx: int
    created: int


@dataclass(slots=True)
class Lease:
    """One request's hold on a model: ``load_ms`` when the request waited for its load."""
    target: Target
    held: Held | None = None
    load_ms: float | None = None


class Targets:
    def __init__(self, pool: ModelPool | None = None) -> None:
        self.pool = pool
        self._own: Target | None = None
        self._last_own: str | None = None  # the id the server's own model had: it is reloading
        self._unavailable = "no model is loaded yet"
        self._lock = threading.Lock()

    def attach(self, scheduler: Scheduler) -> None:
        model = scheduler.engine.describe()
        t = Target(scheduler, loaded_model_id(model), model.n_ctx, int(time.time()))
        with self._lock:
            self._own = t
        if self.pool is not None:
            self.pool.pin(t.model_id, scheduler, model.local.memory_total if model.local is not None else 0, t.n_ctx)

    def detach(self, reason: str) -> None:
        with self._lock:
            if self._own is not None:
                self._last_own = self._own.model_id
            self._own = None
            self._unavailable = reason
        if self.pool is not None:
            self.pool.unpin()

    @property
    def model_id(self) -> str | None:
        t = self._own
        return t.model_id if t is not None else None

    def own(self) -> Target:
        t = self._own
        if t is None:
            raise ApiError(503, f"the server has no model to serve right now: {self._unavailable}",
                           type="server_error", code="model_not_ready")
        return t

    async def lease(self, model: str, ttl: float | None = None) -> Lease:
        """The model a request names, loading it from the library first when the pool can."""
        t = self._own
        if t is not None and model == t.model_id:
            return Lease(t)
        if t is None and model == self._last_own:
            self.own()  # the server's own model is being replaced: 503 with why, not a second copy
        if self.pool is None:
            t = self.own()  # 503 while the server's own model loads
            raise ApiError(404, f"the model {model!r} is not served here; this server runs {t.model_id!r}",
                           param="model", code="model_not_found")
        pool = self.pool
        got: list[tuple[Held, float | None]] = []
        try:
            await anyio.to_thread.run_sync(lambda: got.append(pool.acquire(model, ttl)))
        except BaseException:
            if got:  # the client left while its model loaded: the load stays, the hold goes
                pool.release(got[0][0])
            raise
        h, ms = got[0]
        return Lease(Target(h.scheduler, h.model_id, h.n_ctx, h.created), h, ms)

    def release(self, lease: Lease | None) -> None:
        if lease is not None and lease.held is not None and self.pool is not None:
            held, lease.held = lease.held, None  # once, whichever end path comes first
            self.pool.release(held)

    def cards(self) -> list[dict[str, Any]]:
        """``GET /v1/models``: the server's own model, then (with a pool) every library model,
        each marked loaded or not."""
        t = self._own
        own = [] if t is None else [_card(t.model_id, t.created, t.n_ctx, True, t.scheduler.think)]
        if self.pool is None:
            return own
        held = {h.model_id: h for h in self.pool.held()}
        out = own + [_card(h.model_id, h.created, h.n_ctx, True, h.scheduler.think) for h in held.values()
                     if t is None or h.model_id != t.model_id]
        listed = {c["id"] for c in out}
        out += [_card(mid, 0, None, False) for mid in self.pool.catalog() if mid not in listed]
        return out

    def card(self, model: str) -> dict[str, Any]:
        for c in self.cards():
            if c["id"] == model:
                return c
        t = self.own()
        raise ApiError(404, f"the model {model!r} is not served here; this server runs {t.model_id!r}",
                       param="model", code="model_not_found")


def _card(mid: str, created: int, n_ctx: int | None, loaded: bool, think: ThinkControl | None = None) -> dict[str, Any]:
    """One model's card. A loaded one says its Think control (``hearth_think``, null: none): what a client
    may set through ``chat_template_kwargs``, and what the model does when it sets nothing."""
    c: dict[str, Any] = {"id": mid, "object": "model", "created": created, "owned_by": "hearth", "loaded": loaded}
    if n_ctx is not None:
        c["context_length"] = n_ctx
    if loaded:
        c["hearth_think"] = think.as_dict() if think is not None else None
    return c

"""Any library model on request: the models the local server holds beside its own.

The server always serves its own model (the window's, or the one ``engine serve``
started with). It is pinned: the API never unloads it. A request that names
another model of the library loads it through the same planned load as the
window (loading.load.load_model, the batch context counted), once: a request for
a model that is loading waits for that load, and loads run one at a time.

What fits is the plan's to say. The new model is planned for the machine less
what the models already held take (their allocated buffers). When the plan says
it does not fit, the least recently used model the API loaded (and nothing is
asking) is unloaded and the plan made again; when only models that cannot go
are left, the answer is a 503 that says why. A model the API loaded goes after
``ttl`` seconds without requests (10 minutes unless a request's ``keep_alive``
or ``ttl`` says otherwise; 0 unloads it when its request ends, a negative value
keeps it).
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from ...errors import HearthError
from ..protocols.openai import ApiError
from .quiet_gc import settle

DEFAULT_TTL_S = 600.0
LOAD_WAIT_S = 600.0        # a request waits this long for models in use to free room
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {None: 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def keep_alive(body: Any) -> float | None:
    """A request's own idle time in seconds: Ollama's ``keep_alive`` ("5m", "1h", seconds, 0 to
    unload when done, negative to keep) or LM Studio's ``ttl`` (seconds); None: the default.
    Raises ApiError naming the field for anything else."""
    if not isinstance(body, dict):
        return None
    for key in ("keep_alive", "ttl"):
        v = body.get(key)
        if v is None:
            continue
        if isinstance(v, bool):
            raise ApiError(400, f"{key} must be a duration such as \"5m\" or a number of seconds", param=key)
        if isinstance(v, (int, float)):
            seconds = float(v)
        elif isinstance(v, str) and (m := _DURATION.match(v)):
            seconds = float(m.group(1)) * _UNIT[m.group(2)]
        else:
            raise ApiError(400, f"{key} must be a duration such as \"5m\" or a number of seconds", param=key)
        return float("inf") if seconds < 0 else seconds
    return None


@dataclass(slots=True)
class Held:
    """A model the server holds: its scheduler, what it takes, and who may unload it."""
    model_id: str
    scheduler: Any            # a Scheduler
    memory: int               # bytes the backend allocated (weights, KV, buffers)
    n_ctx: int
    pinned: bool              # the server's own model: never unloaded by the API
    created: int
    ttl: float = DEFAULT_TTL_S
    last_used: float = 0.0
    busy: int = 0             # requests in flight


@dataclass(slots=True, frozen=True)
class Opened:
    """What ``open_model`` gives back: the scheduler over the loaded engine, and its size."""
    scheduler: Any
    memory: int
    n_ctx: int


class ModelPool:
    """The server's models: its own (pinned) and those requests loaded, by API model id.

    ``catalog()``: the library as {API model id: model string for a LoadSpec}.
    ``fits(model, held_bytes)``: None when the model fits beside ``held_bytes`` of models
    already held, or the sentence that says why not. ``open_model(model, held_bytes)``:
    load it (planned for the memory left) as an Opened. All three may block; the server
    calls ``acquire`` on a worker thread."""

    def __init__(self, catalog: Callable[[], dict[str, str]], *, fits: Callable[[str, int], str | None],
                 open_model: Callable[[str, int], Opened], default_ttl: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.catalog = catalog
        self._fits = fits
        self._open = open_model
        self.default_ttl = default_ttl
        self._clock = clock
        self._cv = threading.Condition()
        self._held: dict[str, Held] = {}
        self._loading: set[str] = set()
        self._load_lock = threading.Lock()
        self.loads = 0
        self.unloads: list[tuple[str, str]] = []   # (model id, why), the latest last
        self._closed = False

    # -- the server's own model ------------------------------------------------------

    def pin(self, model_id: str, scheduler: Any, memory: int, n_ctx: int) -> None:
        """The server's own model (a new one replaces the old, which its owner closes)."""
        with self._cv:
            for k in [k for k, h in self._held.items() if h.pinned]:
                del self._held[k]
            old = self._held.pop(model_id, None)  # an API copy of the same model is dropped
            self._held[model_id] = Held(model_id, scheduler, memory, n_ctx, True, int(time.time()),
                                        float("inf"), self._clock())
            self._cv.notify_all()
        if old is not None and not old.pinned:
            self._close(old, "the server's own model is now the same model")

    def unpin(self) -> None:
        with self._cv:
            for k in [k for k, h in self._held.items() if h.pinned]:
                del self._held[k]
            self._cv.notify_all()

    # -- requests -------------------------------------------------------------------

    def held(self) -> list[Held]:
        """The models held now, the pinned one first, then the most recently used."""
        with self._cv:
            return sorted(self._held.values(), key=lambda h: (not h.pinned, -h.last_used))

    def acquire(self, model_id: str, ttl: float | None = None) -> tuple[Held, float | None]:
        """The model ``model_id`` for one request (``release`` it after), loading it first if
        need be; and the milliseconds this request waited for a load (None: it was held)."""
        t0 = self._clock()
        waited = False
        while True:
            with self._cv:
                while True:
                    if self._closed:
                        raise ApiError(503, "the server is stopping", type="server_error", code="model_not_ready")
                    h = self._held.get(model_id)
                    if h is not None:
                        h.busy += 1
                        h.last_used = self._clock()
                        if ttl is not None and not h.pinned:
                            h.ttl = ttl
                        return h, (self._clock() - t0) * 1e3 if waited else None
                    if model_id not in self._loading:
                        break
                    waited = True
                    self._cv.wait()  # another request is loading it: wait for that load, never a second
            catalog = self.catalog()  # a scan reads headers: not under the lock
            if model_id not in catalog:
                raise ApiError(404, f"the model {model_id!r} is not in this server's library; GET /v1/models "
                               "lists the models it can serve", param="model", code="model_not_found")
            with self._cv:
                if model_id in self._held or model_id in self._loading:
                    continue  # held or being loaded meanwhile: back to the top
                self._loading.add(model_id)
            break
        try:
            with self._load_lock:  # one load at a time: two at once would each plan for the same memory
                h = self._load(model_id, catalog[model_id], ttl)
        finally:
            with self._cv:
                self._loading.discard(model_id)
                self._cv.notify_all()
        return h, (self._clock() - t0) * 1e3

    def release(self, h: Held) -> None:
        with self._cv:
            h.busy = max(0, h.busy - 1)
            h.last_used = self._clock()
            gone = not h.pinned and h.busy == 0 and h.ttl <= 0 and self._held.get(h.model_id) is h
            if gone:
                del self._held[h.model_id]
            self._cv.notify_all()
        if gone:
            self._close(h, "keep_alive 0: unloaded when its request ended")

    def _load(self, model_id: str, model: str, ttl: float | None) -> Held:
        with self._cv:
            pinned = [h for h in self._held.values() if h.pinned]
        why = self._fits(model, sum(h.memory for h in pinned))
        if why is not None:  # not even with every other model gone: unload nothing in vain
            beside = ", ".join(h.model_id for h in pinned) or "nothing else"
            raise ApiError(503, f"{model_id} cannot be loaded: it does not fit in memory beside {beside} ({why})",
                           type="server_error", code="model_does_not_fit")
        deadline = self._clock() + LOAD_WAIT_S
        while True:
            with self._cv:
                used = sum(h.memory for h in self._held.values())
            why = self._fits(model, used)
            if why is None:
                break
            with self._cv:
                idle = [h for h in self._held.values() if not h.pinned and h.busy == 0]
                waiting = [h for h in self._held.values() if not h.pinned and h.busy > 0]
                if idle:
                    victim = min(idle, key=lambda h: h.last_used)
                    del self._held[victim.model_id]
                elif waiting and self._clock() < deadline:
                    self._cv.wait(1.0)  # models in use: their requests end, then one can go
                    continue
                else:
                    beside = ", ".join(h.model_id for h in self._held.values()) or "nothing else"
                    raise ApiError(503, f"{model_id} cannot be loaded: it does not fit in memory beside "
                                   f"{beside} ({why})", type="server_error", code="model_does_not_fit")
            self._close(victim, f"unloaded to make room for {model_id} (least recently used)")
        try:
            opened = self._open(model, used)
        except HearthError as e:
            raise ApiError(503, f"{model_id} could not be loaded: {e}", type="server_error",
                           code="model_load_failed") from None
        settle()  # the new model's objects out of the cyclic GC's reach (quiet_gc.py)
        h = Held(model_id, opened.scheduler, opened.memory, opened.n_ctx, False, int(time.time()),
                 self.default_ttl if ttl is None else ttl, self._clock(), busy=1)
        with self._cv:
            self._held[model_id] = h
            self.loads += 1
        return h

    # -- idle unload ----------------------------------------------------------------

    def reap(self) -> list[str]:
        """Unload the API-loaded models idle past their ttl; their ids."""
        now = self._clock()
        with self._cv:
            gone = [h for h in self._held.values()
                    if not h.pinned and h.busy == 0 and now - h.last_used >= h.ttl]
            for h in gone:
                del self._held[h.model_id]
        for h in gone:
            self._close(h, f"idle for {h.ttl:.0f} s")
        return [h.model_id for h in gone]

    def close(self) -> None:
        """Unload every model the API loaded (the pinned one is its owner's to close)."""
        with self._cv:
            self._closed = True
            gone = [h for h in self._held.values() if not h.pinned]
            self._held = {k: h for k, h in self._held.items() if h.pinned}
            self._cv.notify_all()
        for h in gone:
            self._close(h, "the server stopped")

    def _close(self, h: Held, why: str) -> None:
        scheduler = h.scheduler
        engine = getattr(scheduler, "engine", None)
        try:
            scheduler.close()
            if engine is not None:
                engine.close()
        finally:  # recorded once its memory is given back, not when it leaves the list
            self.unloads.append((h.model_id, why))
            del self.unloads[:-64]

    def describe(self) -> list[dict[str, Any]]:
        """What the window shows: each model held, whose it is, and how long it has been idle."""
        now = self._clock()
        return [{"id": h.model_id, "pinned": h.pinned, "busy": h.busy, "idle_s": now - h.last_used,
                 "ttl_s": None if h.ttl == float("inf") else h.ttl, "memory": h.memory} for h in self.held()]


def reduced(hardware, held_bytes: int):
    """``hardware`` with the RAM the held models take counted as used."""
    left = max(0, min(hardware.ram_available, hardware.ram_total - held_bytes))
    return replace(hardware, ram_available=left)

"""The server's door to one model: a queue limit, and tickets over the engine's one road.

Callers ``submit`` a :class:`ServeRequest` and read its :class:`Ticket`. Every
request, the window's included, runs through the engine's ``stream`` (or
``complete``): for the local engine that is the engine core (engine/core), which
steps every request in one batch per step, by priority, with the same features for
all (speculation, the thinking budget, the after-reasoning grammar, the prefix cache
in memory and on disk); a remote engine's server does its own scheduling. Here,
only what the server owes its clients: at most ``queue_limit`` requests waiting
beyond what the engine runs at once (one more gets :class:`QueueFull` with a retry
estimate: HTTP 429), and the counts a status indicator shows.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Iterator

from ...errors import HearthError
from ...interface import ChatEngine, continue_text, scheduling
from ...types import StreamEvent
from .requests import CONTEXT_POLICIES, Priority, QueueFull, ServeRequest, Ticket

RETRY_FLOOR_S = 1.0   # the shortest Retry-After the scheduler suggests
_RECENT = 16          # requests whose service time the retry estimate averages


class Scheduler:
    """Serves requests for one engine (:class:`ChatEngine`). ``parallel``: API requests the engine
    runs at once (an engine that schedules its own: its KV pool grows to hold them, set_parallel),
    besides the window's own where ``window`` (the app's engine; not ``engine serve``'s or a model the
    API loaded); beyond them, at most ``queue_limit`` wait. An engine whose server schedules its
    requests counts as running one at a time here. Close the scheduler before its engine."""

    def __init__(self, engine: ChatEngine, *, parallel: int = 4, queue_limit: int = 16, window: bool = True) -> None:
        if parallel < 1:
            raise HearthError(f"parallel must be >= 1, got {parallel}")
        if queue_limit < 0:
            raise HearthError(f"queue_limit must be >= 0, got {queue_limit}")
        self._engine = engine
        self._queue = scheduling(engine)  # None: its server keeps the queue
        if self._queue is not None:
            self._queue.set_parallel(parallel, window=window)
        info = engine.describe()  # fixed for the engine's life: read once, not per request
        self.think = info.think
        self.n_ctx = info.n_ctx
        self.parallel = parallel
        self.queue_limit = queue_limit
        self._lock = threading.Condition()
        self._active: set[Ticket] = set()
        self._seq = 0
        self._served = 0
        self._service_s: list[float] = []
        self._closed = False

    @property
    def engine(self) -> ChatEngine:
        return self._engine

    @property
    def batching(self) -> bool:
        """Whether the engine runs several requests at once (else they take turns)."""
        return self._capacity() > 1

    # -- callers ------------------------------------------------------------------

    def submit(self, req: ServeRequest) -> Ticket:
        """Queue ``req``; raises QueueFull when ``queue_limit`` API requests already wait (the
        window's are never refused)."""
        with self._lock:
            if self._closed:
                raise HearthError("the scheduler is closed")
            api = [t for t in self._active if t.request.priority != Priority.WINDOW]
            waiting = len(api) - self._capacity()
            if req.priority != Priority.WINDOW and waiting >= self.queue_limit:
                raise QueueFull(f"{waiting} requests are already waiting; try again shortly",
                                retry_after_s=self._retry_after(waiting))
            self._seq += 1
            ticket = Ticket(req, self._seq, self._events)
            ticket.on_done = self._count
            self._active.add(ticket)
        return ticket

    def stats(self) -> dict:
        """Counts for a status indicator: running, queued and served requests; and the tokens the
        engine's KV sequences hold, of what they can hold (0 of 0 where its server keeps them)."""
        load = self._queue.load() if self._queue is not None else {}  # the engine's own counts, where it keeps a queue
        with self._lock:
            active = len(self._active)
            capacity = self._capacity()
            running = load.get("running", min(active, capacity))
            queued = load.get("waiting", max(0, active - capacity))
            return {"running": running, "queued": queued, "served": self._served, "parallel": self.parallel,
                    "batching": capacity > 1, "kv_used_tokens": load.get("kv_used_tokens", 0),
                    "kv_capacity_tokens": load.get("kv_capacity_tokens", 0)}

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no request is in flight; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._active or self._closed, timeout)

    def close(self) -> None:
        """Cancel every request in flight; new ones are refused (the engine stays open)."""
        with self._lock:
            self._closed = True
            active = list(self._active)
            self._lock.notify_all()
        for t in active:
            t.cancel()

    def _capacity(self) -> int:
        return self._queue.capacity() if self._queue is not None else 1  # a server batches its own requests

    def _count(self, ticket: Ticket) -> None:
        with self._lock:
            self._active.discard(ticket)
            self._served += 1
            self._service_s = (self._service_s + [time.perf_counter() - ticket.submitted])[-_RECENT:]
            self._lock.notify_all()

    def _retry_after(self, waiting: int) -> float:
        # The requests ahead, served ``parallel`` at a time, at the recent mean service time.
        mean = sum(self._service_s) / len(self._service_s) if self._service_s else RETRY_FLOOR_S
        return max(RETRY_FLOOR_S, round(mean * (waiting + 1) / self.parallel, 1))

    def _events(self, ticket: Ticket) -> Iterator[StreamEvent]:
        """The request's events from the engine (run by the ticket's reader)."""
        req = ticket.request
        params = req.params
        if req.grammar is not None:  # GBNF the reply (or its answer) follows
            params = dataclasses.replace(params, grammar=req.grammar, grammar_scope=req.grammar_scope)
        if req.prompt is not None:
            return continue_text(self._engine, req.prompt, params, cancel=ticket.cancel_flag, priority=req.priority,
                                 max_wait_s=req.max_wait_s, label=req.label)
        assert req.messages is not None  # ServeRequest checks exactly one is set
        return self._engine.stream(req.messages, params, cancel=ticket.cancel_flag,
                                   context_policy=CONTEXT_POLICIES[req.context_policy],
                                   template_kwargs=req.template_kwargs, tools=req.tools, priority=req.priority,
                                   max_wait_s=req.max_wait_s, label=req.label)

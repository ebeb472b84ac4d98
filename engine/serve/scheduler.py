"""The scheduler: one model, several callers, the window first.

Callers ``submit`` a :class:`ServeRequest` and read its :class:`Ticket`.
One worker thread owns the engine. The window's requests
(``Priority.WINDOW``) always run before API requests; API requests run first
come, first served, and at most ``queue_limit`` of them wait: one more is
refused with :class:`QueueFull` and a retry estimate (HTTP 429).
"""
from __future__ import annotations

import dataclasses
import heapq
import threading
import time
from typing import Iterator

from ..engine import Engine
from ..errors import HearthError
from ..metrics import GenerationStats
from ..types import StreamEvent
from .requests import CONTEXT_POLICIES, FINISH, Priority, QueueFull, ServeRequest, Ticket

RETRY_FLOOR_S = 1.0   # the shortest Retry-After the scheduler suggests
_RECENT = 16          # requests whose service time the retry estimate averages


class Scheduler:
    """Serves requests for one :class:`Engine` from a worker thread it owns."""

    def __init__(self, engine: Engine, *, parallel: int = 4, queue_limit: int = 16) -> None:
        if parallel < 1:
            raise HearthError(f"parallel must be >= 1, got {parallel}")
        if queue_limit < 0:
            raise HearthError(f"queue_limit must be >= 0, got {queue_limit}")
        self._engine = engine
        self.parallel = parallel
        self.queue_limit = queue_limit
        self._cv = threading.Condition()
        self._heap: list[tuple[int, int, Ticket]] = []
        self._seq = 0
        self._running: set[Ticket] = set()
        self._served = 0
        self._service_s: list[float] = []
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="hearth-scheduler", daemon=True)
        self._thread.start()

    @property
    def engine(self) -> Engine:
        return self._engine

    # -- callers ------------------------------------------------------------------

    def submit(self, req: ServeRequest) -> Ticket:
        """Queue ``req``; raises QueueFull when ``queue_limit`` API requests already wait."""
        with self._cv:
            if self._closed:
                raise HearthError("the scheduler is closed")
            if req.priority != Priority.WINDOW:
                waiting = sum(1 for _, _, t in self._heap if t.request.priority != Priority.WINDOW)
                if waiting >= self.queue_limit:
                    raise QueueFull(f"{waiting} requests are already waiting; try again shortly",
                                    retry_after_s=self._retry_after(waiting))
            self._seq += 1
            ticket = Ticket(req, self._seq)
            heapq.heappush(self._heap, (int(req.priority), self._seq, ticket))
            self._cv.notify_all()
        return ticket

    def stats(self) -> dict:
        """Counts for a status indicator: running, queued and served requests."""
        with self._cv:
            return {"running": len(self._running), "queued": len(self._heap), "served": self._served,
                    "parallel": self.parallel}

    def close(self) -> None:
        """Cancel every request (queued and running) and stop the worker thread."""
        with self._cv:
            self._closed = True
            for _, _, t in self._heap:
                t.cancel()
            for t in self._running:
                t.cancel()
            self._cv.notify_all()
        self._thread.join()

    def _retry_after(self, waiting: int) -> float:
        # The requests ahead, served ``parallel`` at a time, at the recent mean service time.
        mean = sum(self._service_s) / len(self._service_s) if self._service_s else RETRY_FLOOR_S
        return max(RETRY_FLOOR_S, round(mean * (waiting + 1) / self.parallel, 1))

    # -- the worker -----------------------------------------------------------------

    def _next(self) -> Ticket | None:
        with self._cv:
            while not self._heap and not self._closed:
                self._cv.wait()
            if not self._heap:
                return None
            _, _, ticket = heapq.heappop(self._heap)
            self._running.add(ticket)
            return ticket

    def _loop(self) -> None:
        while True:
            ticket = self._next()
            if ticket is None:
                return
            try:
                self._serve(ticket)
            finally:
                with self._cv:
                    self._running.discard(ticket)
                    self._served += 1
                    self._service_s = (self._service_s + [time.perf_counter() - ticket.submitted])[-_RECENT:]

    def _serve(self, ticket: Ticket) -> None:
        times = ticket.times
        ticket.started = time.perf_counter()
        times.queue_wait_s = ticket.started - ticket.submitted
        if ticket.cancel_flag.is_set():
            ticket.post(StreamEvent("final", "", finish_reason="cancelled", stats=GenerationStats(
                finish_reason="cancelled")))
            ticket.finish("cancelled")
            return
        try:
            for ev in self._events(ticket):
                if ev.kind == "final":
                    st = ev.stats
                    assert st is not None  # every final event carries its stats
                    times.prefill_s = st.prefill_ms / 1e3
                    times.decode_s = st.decode_ms / 1e3
                    times.prompt_tokens = st.prompt_tokens
                    times.cached_tokens = st.cached_tokens
                    times.completion_tokens = st.generated_tokens
                    ticket.post(ev)
                    ticket.finish(FINISH.get(ev.finish_reason or "", "stop"))
                    return
                ticket.post(ev)
        except HearthError as e:
            ticket.finish(None, error=e)
        except Exception as e:  # a bug must end the request, not the server
            ticket.finish(None, error=HearthError(f"the request failed: {e}"))
        else:
            ticket.finish("stop")

    def _events(self, ticket: Ticket) -> Iterator[StreamEvent]:
        req = ticket.request
        params = req.params if req.grammar is None else dataclasses.replace(req.params, grammar=req.grammar)
        if req.prompt is not None:
            return self._engine.complete(req.prompt, params, cancel=ticket.cancel_flag)
        assert req.messages is not None  # ServeRequest checks exactly one is set
        return self._engine.stream(req.messages, params, cancel=ticket.cancel_flag,
                                   context_policy=CONTEXT_POLICIES[req.context_policy])

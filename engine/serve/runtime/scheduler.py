"""The scheduler: one model, several callers, the window first.

Callers ``submit`` a :class:`ServeRequest` and read its :class:`Ticket`. One
worker thread owns the model. The window's requests (``Priority.WINDOW``) run
through the engine itself (its prefix cache, speculation and prefill progress,
on its own context), one at a time, before anything else. API requests are
served first come, first served, with at most ``queue_limit`` waiting (one more
gets :class:`QueueFull` with a retry estimate: HTTP 429). Where the engine opens
a batch context (llama.cpp: a second context on the same weights,
engine/decode/batch.py) they are continuously batched; on an engine without one
they run one at a time through the engine, and a window request waits for the
one API request in progress to end. The scheduler reaches the engine only
through the engine interface (engine/interface.py).

While the window streams, API prompts are not read at all and API decoding
gets at most ``window_share`` of the window's own compute time, so the
window's time to first token and tokens/s hold.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from typing import Generator, Iterator

from ...backends import openmp
from ...decode.batch import BatchSession
from ...decode.metrics import GenerationStats, openai_finish_reason
from ...errors import HearthError
from ...interface import ChatEngine
from ...types import StreamEvent
from .requests import CONTEXT_POLICIES, Priority, QueueFull, ServeRequest, Ticket

RETRY_FLOOR_S = 1.0   # the shortest Retry-After the scheduler suggests
_RECENT = 16          # requests whose service time the retry estimate averages
PREFILL_CHUNK = 128   # prompt tokens per batch step: bounds the wait of a window request arriving mid-step
WINDOW_SHARE = 0.1    # API compute per unit of window compute while the window streams (0.2 measured 1.33x)


class Scheduler:
    """Serves requests for one engine (:class:`ChatEngine`) from a worker thread it owns.

    ``parallel``: API sequences decoded together; ``slot_ctx``: the context of
    each (default: the engine's). Close the scheduler before its engine."""

    def __init__(self, engine: ChatEngine, *, parallel: int = 4, queue_limit: int = 16, slot_ctx: int | None = None,
                 prefill_chunk: int = PREFILL_CHUNK, window_share: float = WINDOW_SHARE) -> None:
        if parallel < 1:
            raise HearthError(f"parallel must be >= 1, got {parallel}")
        if queue_limit < 0:
            raise HearthError(f"queue_limit must be >= 0, got {queue_limit}")
        self._engine = engine
        self.parallel = parallel
        self.queue_limit = queue_limit
        self.window_share = window_share
        self.slot_ctx = slot_ctx or engine.n_ctx
        self._batch: BatchSession | None = engine.open_batch(parallel, self.slot_ctx, prefill_chunk)
        if self._batch is not None:
            self._batch.on_wake(self._wake)
        self._cv = threading.Condition()
        self._window_q: deque[Ticket] = deque()
        self._api_q: deque[Ticket] = deque()
        self._window: Iterator[None] | None = None
        self._solo: Iterator[None] | None = None
        self._running: set[Ticket] = set()
        self._seq = 0
        self._served = 0
        self._service_s: list[float] = []
        self._window_s = self._api_s = 0.0
        self._closed = False
        # From here on this scheduler's thread computes: the thread that computed until now
        # (the window's engine thread) gives back its idle OpenMP team, or libgomp throttles
        # both teams' waits (28 instead of 88 tokens/s on 2 cores; engine/openmp.py).
        openmp.release()
        self._thread = threading.Thread(target=self._loop, name="hearth-scheduler", daemon=True)
        self._thread.start()

    @property
    def engine(self) -> ChatEngine:
        return self._engine

    @property
    def batching(self) -> bool:
        """Whether API requests are decoded together (llama.cpp) or one at a time."""
        return self._batch is not None

    # -- callers ------------------------------------------------------------------

    def submit(self, req: ServeRequest) -> Ticket:
        """Queue ``req``; raises QueueFull when ``queue_limit`` API requests already wait."""
        with self._cv:
            if self._closed:
                raise HearthError("the scheduler is closed")
            q = self._window_q if req.priority == Priority.WINDOW else self._api_q
            if q is self._api_q:
                waiting = sum(1 for t in q if not t.cancel_flag.is_set())
                if waiting >= self.queue_limit:
                    raise QueueFull(f"{waiting} requests are already waiting; try again shortly",
                                    retry_after_s=self._retry_after(waiting))
            self._seq += 1
            ticket = Ticket(req, self._seq)
            ticket.on_cancel = self._wake
            ticket.on_done = self._count
            q.append(ticket)
            self._cv.notify_all()
        return ticket

    def stats(self) -> dict:
        """Counts for a status indicator: running, queued and served requests; and the tokens the batch
        context's sequences hold in its KV, of what it can hold (0 of 0 without one)."""
        with self._cv:
            batched = len(self._batch.active()) if self._batch else 0
            kv = self._batch.runner.table.kv if self._batch else []
            return {"running": len(self._running) + batched, "queued": len(self._window_q) + len(self._api_q),
                    "served": self._served, "parallel": self.parallel, "batching": self.batching,
                    "kv_used_tokens": sum(len(k) for k in kv), "kv_capacity_tokens": len(kv) * self.slot_ctx}

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running (every slot released); False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._has_work() or self._closed, timeout)

    def close(self) -> None:
        """Cancel every request (queued and running) and stop the worker thread."""
        with self._cv:
            self._closed = True
            for t in [*self._window_q, *self._api_q, *self._running]:
                t.cancel_flag.set()
            self._cv.notify_all()
        self._thread.join()

    def _count(self, ticket: Ticket) -> None:
        with self._cv:
            self._served += 1
            self._service_s = (self._service_s + [time.perf_counter() - ticket.submitted])[-_RECENT:]

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def _retry_after(self, waiting: int) -> float:
        # The requests ahead, served ``parallel`` at a time, at the recent mean service time.
        mean = sum(self._service_s) / len(self._service_s) if self._service_s else RETRY_FLOOR_S
        return max(RETRY_FLOOR_S, round(mean * (waiting + 1) / self.parallel, 1))

    # -- the worker -----------------------------------------------------------------

    def _has_work(self) -> bool:
        """Anything queued or held (a batch slot still held for its reader counts: wait_idle waits for it)."""
        return bool(self._window_q or self._api_q or self._window or self._solo
                    or (self._batch and self._batch.active()))

    def _ready(self) -> bool:
        """Whether the worker has a step to take now (a slot held only for its reader has none)."""
        batch = self._batch
        return bool(self._window_q or self._window or self._solo or (batch is not None and batch.busy())
                    or (self._api_q and (batch is None or batch.free())))

    def _take(self) -> list[Ticket]:
        """Under the lock: start what may start now; returns API tickets to admit to the batch."""
        for q in (self._window_q, self._api_q):
            for t in [t for t in q if t.cancel_flag.is_set()]:
                q.remove(t)
                _cancelled_before_start(t)
        # One engine context: without batching, the window waits for the API request on it to end.
        if self._window is None and self._solo is None and self._window_q:
            t = self._window_q.popleft()
            self._running.add(t)
            t.started = time.perf_counter()
            self._window = self._drive(t)
            self._window_s = self._api_s = 0.0
        admits: list[Ticket] = []
        if self._batch is not None:
            while self._api_q and len(admits) < self._batch.free():
                if self._api_q[0].request.has_images:  # through the engine, one at a time, beside the batch
                    if self._solo is not None or self._window is not None:
                        break
                    t = self._api_q.popleft()
                    self._running.add(t)
                    self._solo = self._drive(t)
                    continue
                admits.append(self._api_q.popleft())
        elif self._solo is None and self._window is None and self._api_q:
            t = self._api_q.popleft()
            self._running.add(t)
            self._solo = self._drive(t)
        return admits

    def _loop(self) -> None:
        runner = self._batch
        while True:
            with self._cv:
                while not self._ready() and not self._closed:
                    self._cv.notify_all()  # wait_idle() callers
                    self._cv.wait()
                if self._closed:
                    for t in self._running:
                        t.cancel_flag.set()
                    if runner is not None:
                        runner.cancel_all()
                if not self._has_work():
                    break
                admits = self._take()
            for t in admits:
                self._admit(t)
            if self._window is not None:
                t0 = time.perf_counter()
                self._window = self._advance(self._window)
                t1 = time.perf_counter()
                self._window_s += t1 - t0
                if runner is not None and self._api_s <= self.window_share * self._window_s:
                    runner.step(decode_only=True)  # no prompt reading while the window streams
                    self._api_s += time.perf_counter() - t1
                continue
            if self._solo is not None:
                self._solo = self._advance(self._solo)
            if runner is not None:
                runner.step()
        if runner is not None:
            runner.close()

    def _advance(self, steps: Iterator[None]) -> Iterator[None] | None:
        try:
            next(steps)
            return steps
        except StopIteration:
            return None

    def _admit(self, ticket: Ticket) -> None:
        """Prepare an API request and give it a batch slot (errors end it here)."""
        assert self._batch is not None
        req = ticket.request
        ticket.started = time.perf_counter()
        try:
            self._batch.admit(ticket, _params(req), messages=req.messages, text=req.prompt,
                              context_policy=CONTEXT_POLICIES[req.context_policy],
                              template_kwargs=req.template_kwargs, tools=req.tools)
        except HearthError as e:
            ticket.times.queue_wait_s = ticket.started - ticket.submitted
            ticket.finish(None, error=e)

    def _drive(self, ticket: Ticket) -> Generator[None, None, None]:
        """One request through the engine, a step per event posted."""
        times = ticket.times
        if ticket.started is None:
            ticket.started = time.perf_counter()
        times.queue_wait_s = ticket.started - ticket.submitted
        waited = False
        try:
            for ev in self._events(ticket):
                if not waited and ev.stats is not None:
                    # The engine's clock started when this request left the queue; from the
                    # first event on, the record's live TTFT and its final figures include the wait.
                    ev.stats.record_queue_wait(times.queue_wait_s * 1e3)
                    waited = True
                ticket.post(ev)
                if ev.kind == "final":
                    st = ev.stats
                    assert st is not None  # every final event carries its stats
                    # Started -> first token: the prompt's preparation, then reading it.
                    times.prefill_s = (st.template_ms + st.tokenize_ms + st.prefill_ms) / 1e3
                    times.decode_s = st.decode_ms / 1e3
                    times.prompt_tokens = st.prompt_tokens
                    times.cached_tokens = st.cached_tokens
                    times.completion_tokens = st.generated_tokens
                    ticket.finish(openai_finish_reason(ev.finish_reason))
                yield
        except HearthError as e:
            ticket.finish(None, error=e)
        except Exception as e:  # a bug must end the request, not the server
            ticket.finish(None, error=HearthError(f"the request failed: {e}"))
        finally:
            ticket.finish("stop")  # no-op after the final event
            with self._cv:
                self._running.discard(ticket)

    def _events(self, ticket: Ticket) -> Iterator[StreamEvent]:
        req = ticket.request
        if req.prompt is not None:
            return self._engine.complete(req.prompt, _params(req), cancel=ticket.cancel_flag)
        assert req.messages is not None  # ServeRequest checks exactly one is set
        return self._engine.stream(req.messages, _params(req), cancel=ticket.cancel_flag,
                                   context_policy=CONTEXT_POLICIES[req.context_policy],
                                   template_kwargs=req.template_kwargs, tools=req.tools)


def _params(req: ServeRequest):
    """The request's sampling parameters with its grammar (GBNF every generated token follows)."""
    return req.params if req.grammar is None else dataclasses.replace(req.params, grammar=req.grammar)


def _cancelled_before_start(ticket: Ticket) -> None:
    ticket.post(StreamEvent("final", "", finish_reason="cancelled", stats=GenerationStats(finish_reason="cancelled")))
    ticket.finish("cancelled")

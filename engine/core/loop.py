"""The engine core: one thread, one step loop, one batch per step, for every request.

Callers ``submit`` a :class:`~engine.core.job.Job` and read its
:class:`~engine.core.job.Handle`. The core's thread owns the model: it gives each
request a sequence of the backend's pool (reusing the longest prefix any sequence
or the prefix cache holds), starts its pipeline (engine/core/reply.py), and then
steps: each step collects every pipeline's pending Compute, plans one batch
(engine/core/schedule.py: decodes first, prompt chunks by priority under the
token budget, the window protected), runs it with one ``SeqPool.batch`` (the one
place generation calls the backend), and sends each pipeline its logits. A
pipeline's events go to its reader as they come.

All compute runs on this one thread: libgomp gives each thread that computes a team
of workers of its own, and two teams on the same cores slow both (engine/backends/
openmp.py). What else must compute (a measurement, a resize) runs here too, between
steps (``call``).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable

from ..errors import Cancelled, HearthError
from ..kv.reuse import PREFILL_CHUNK
from ..types import WANT_NONE, Compute
from .job import Handle, Job, Priority, QueueTimeout
from .lease import SeqLease, TrackedView
from .run import Run, cancelled_before_start
from .schedule import Share
from .step import Stepper

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..kv.reuse import KVReuse

log = logging.getLogger("hearth.core")

RETRY_FLOOR_S = 1.0  # the shortest Retry-After the core suggests
_RECENT = 16         # requests whose service time the retry estimate averages


class EngineCore:
    """Steps every request of one backend on a thread of its own. Close it before the backend."""

    def __init__(self, backend: "Backend", reuse: "KVReuse", *, step_tokens: int = PREFILL_CHUNK,
                 share: Share | None = None) -> None:
        self.backend = backend
        self.pool = backend.pool()
        self.reuse = reuse
        self.stepper = Stepper(self.pool, reuse, self._end, step_tokens=step_tokens, share=share)
        self._cv = threading.Condition()
        self._queue: list[Run] = []
        self._running: dict[int, Run] = {}
        self._calls: collections.deque[tuple[Callable[[], Any], Future]] = collections.deque()
        self._closed = False
        self._holds = 0  # when_idle() callers waiting: no new request starts meanwhile
        # Sequences only the window's requests may take (0 or 1): with one, the window's reply never
        # waits for a sequence, and its conversation's KV stays where it was between turns.
        self.reserve = 0
        self._served = 0
        self._service_s: list[float] = []
        self._thread = threading.Thread(target=self._loop, name="hearth-core", daemon=True)
        self._thread.start()

    # -- callers -----------------------------------------------------------------------------

    def submit(self, job: Job) -> Handle:
        """Queue ``job``; its handle yields the reply's events."""
        handle = Handle(job)
        handle.on_cancel = self._wake
        with self._cv:
            if self._closed:
                raise HearthError("the engine is closed")
            self._queue.append(Run(job, handle))
            self._cv.notify_all()
        return handle

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the core's thread between two steps and return what it returns (its error
        is raised here). From the core's thread itself (a pipeline), it just runs."""
        if threading.current_thread() is self._thread:
            return fn()
        fut: Future = Future()
        with self._cv:
            if self._closed:
                raise HearthError("the engine is closed")
            self._calls.append((fn, fut))
            self._cv.notify_all()
        return fut.result()

    def when_idle(self, fn: Callable[[], Any]) -> Any:
        """``call`` once no request holds a sequence (new ones wait meanwhile): for what empties the KV."""
        def attempt() -> tuple[bool, Any]:
            if self._running:
                return False, None
            return True, fn()
        with self._cv:
            self._holds += 1
        try:
            while True:
                done, out = self.call(attempt)
                if done:
                    return out
                with self._cv:
                    self._cv.wait_for(lambda: not self._running or self._closed, timeout=0.05)
        finally:
            with self._cv:
                self._holds -= 1
                self._cv.notify_all()

    def load(self) -> dict[str, Any]:
        """The core's figures now: requests running and waiting, sequences, KV in use."""
        with self._cv:
            running = len(self._running)
            waiting = len(self._queue)
        held = sum(len(kv) for kv in self.reuse.table.kv)
        return {"running": running, "waiting": waiting, "served": self._served, "n_seq": self.pool.n_seq,
                "kv_used_tokens": held, "kv_capacity_tokens": self.pool.n_seq * self.pool.n_ctx,
                "steps": self.stepper.steps}

    def requests(self) -> list[dict[str, Any]]:
        """Every request in the core now: its sequence (None while queued), class, who asked, prompt
        length, what its sequence held when it started and holds now, and what it is doing ("queued",
        "preempted" (its sequence given to a more urgent request),
        "waiting" for a shared prefix, reading its "prompt", "decoding")."""
        with self._cv:
            runs = [*self._running.values(), *self._queue]
        out = []
        for r in runs:
            want = r.want
            state = ("preempted" if r.suspended else "queued" if r.seq is None else "waiting" if r.pipe is None
                     else "prompt" if want is not None and want.prompt else "decoding")
            out.append({"seq": r.seq, "priority": int(r.job.priority), "label": r.job.label,
                        "prompt_tokens": len(r.job.prompt), "cached": r.cached, "state": state,
                        "held": self.reuse.table.held(r.seq) if r.seq is not None else 0})
        return out

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running; False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: (not self._queue and not self._running) or self._closed, timeout)

    def capacity(self) -> int:
        """How many requests other than the window's run at once."""
        return max(1, self.pool.n_seq - self.reserve)

    def retry_after(self, waiting: int) -> float:
        """Seconds after which ``waiting`` more requests are likely to have started."""
        mean = sum(self._service_s) / len(self._service_s) if self._service_s else RETRY_FLOOR_S
        return max(RETRY_FLOOR_S, round(mean * (waiting + 1) / self.capacity(), 1))

    def close(self) -> None:
        """Cancel every request (queued and running) and stop the thread."""
        with self._cv:
            self._closed = True
            for r in [*self._queue, *self._running.values()]:
                r.job.cancel.set()
            self._cv.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    # -- the thread --------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            self._run()
        except BaseException as e:  # a bug in the core itself: every request ends with it, none hangs
            log.exception("the engine core stopped")
            with self._cv:
                self._closed = True
                runs = [*self._queue, *self._running.values()]
                self._queue, self._running = [], {}
                calls = list(self._calls)
                self._calls.clear()
                self._cv.notify_all()
            for r in runs:
                r.handle.end(HearthError(f"the engine stopped: {type(e).__name__}: {e}; reload the model"))
            for _fn, fut in calls:
                fut.set_exception(HearthError("the engine stopped"))

    def _run(self) -> None:
        while True:
            with self._cv:
                while not (self._calls or (self._queue and not self._holds) or self._running or self._closed):
                    self._cv.notify_all()  # wait_idle() callers
                    self._cv.wait()
                calls = list(self._calls)
                self._calls.clear()
                closing = self._closed
            for fn, fut in calls:
                self._run_call(fn, fut)
            if closing:
                self._drain()
                return
            self._admit()
            if self._running:
                self._step()

    def _run_call(self, fn: Callable[[], Any], fut: Future) -> None:
        try:
            fut.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            fut.set_exception(e)

    def _drain(self) -> None:
        """Closing: queued requests end cancelled, running ones are stopped and end."""
        with self._cv:
            queued, self._queue = self._queue, []
        for r in queued:
            cancelled_before_start(r.handle)
        for r in list(self._running.values()):
            r.throw(Cancelled("the engine is closing"), self._end)
        for r in list(self._running.values()):  # waiting for a shared prefix, or a pipeline that would not stop
            if r.pipe is None:
                cancelled_before_start(r.handle)
            else:
                r.pipe.close()
            self._end(r, None)
        with self._cv:
            self._cv.notify_all()
        for fn, fut in self._calls:
            fut.set_exception(HearthError("the engine is closed"))

    # -- admission -----------------------------------------------------------------------------

    def _admit(self) -> None:
        """Give queued requests free sequences, by priority, taking a less urgent request's where none
        is free (never the window's); end the cancelled and the too-late."""
        now = time.perf_counter()
        self._reap_queue(now)
        with self._cv:
            if not self._queue or self._holds:
                return
            self._queue.sort(key=lambda r: (self.stepper.rank(r, now), r.job.submitted))
            queued = list(self._queue)
        starting = []
        for r in queued:
            seq = self._free_for(r, now)
            if seq is None:
                continue
            with self._cv:
                self._queue.remove(r)
                r.seq = seq
                self._running[seq] = r
            starting.append(r)
        for r in starting:
            if r.pipe is not None:  # preempted part-way
                self._resume(r)
                continue
            r.admitted = time.perf_counter()
            r.handle.admitted = r.admitted
            if not self._shares_a_reading(r):
                self._start(r)

    def _reap_queue(self, now: float) -> None:
        """End the queued requests that were stopped, or waited past their maximum for a first start."""
        with self._cv:
            stopped = [r for r in self._queue if r.job.cancel.is_set()]
            late = [r for r in self._queue if r.pipe is None and r.job.max_wait_s is not None
                    and now - r.job.submitted > r.job.max_wait_s]
            for r in [*stopped, *late]:
                self._queue.remove(r)
        for r in stopped:
            if r.pipe is not None:  # preempted part-way: its pipeline says it was stopped
                r.throw(Cancelled("stopped"), self._end)
            else:
                cancelled_before_start(r.handle)
        for r in late:
            r.handle.end(QueueTimeout(f"waited {now - r.job.submitted:.0f} s for the model and gave up; "
                                      "try again shortly", self.retry_after(len(self._queue))))

    def _free_for(self, r: Run, now: float) -> int | None:
        """A sequence ``r`` may start on now: a free one (the window's kept for the window's requests), else
        the one a less urgent request holds, which is preempted; None to wait."""
        with self._cv:
            free = [s for s in range(self.pool.n_seq) if s not in self._running]
            others = sum(1 for o in self._running.values() if o.job.priority != Priority.WINDOW)
        window = r.job.priority == Priority.WINDOW
        if free and (window or others < self.pool.n_seq - self.reserve):
            return self.reuse.choose(free, r.held if r.held is not None else r.job.prompt)
        mine = self.stepper.rank(r, now)
        victims = [o for o in self._running.values() if o.job.priority != Priority.WINDOW and o.want is not None
                   and o.wait_for is None and self.stepper.rank(o, now) > mine]
        if not victims:
            return None
        victim = max(victims, key=lambda o: (self.stepper.rank(o, now), o.job.submitted))
        return self._preempt(victim)

    def _preempt(self, r: Run) -> int:
        """Give ``r``'s sequence away: what it holds goes to the prefix cache (where it has room), and ``r``
        waits in the queue, its pipeline part-way, to get those tokens back on a sequence later."""
        seq = r.seq
        assert seq is not None
        r.held = self.reuse.kv_tokens(seq)
        self.reuse.save(seq)
        with self._cv:
            del self._running[seq]
            r.seq = None
            self._queue.append(r)
        log.info("preempted a request (class %d) on sequence %d for a more urgent one", r.job.priority, seq)
        return seq

    def _resume(self, r: Run) -> None:
        """A preempted request on its new sequence: the tokens it held read back (restored where the prefix
        cache or another sequence has them, computed otherwise) before its pipeline goes on."""
        assert r.seq is not None and r.view is not None and r.held is not None
        got = self.reuse.resume(r.seq, r.held)
        r.view.seq = r.seq
        if got < len(r.held):
            r.parked, r.want = r.want, Compute(r.held[got:], WANT_NONE, prompt=True)

    def _shares_a_reading(self, r: Run) -> bool:
        """Whether ``r`` waits for another request still reading a prefix of its prompt (requests that
        arrive together with the same system prompt read it once)."""
        assert r.seq is not None
        table = self.reuse.table
        has = table.place([r.seq], r.job.prompt).shared
        # Only a request at least as urgent is waited for: a lower class may be held back meanwhile.
        others = [(o.seq, o.job.prompt) for o in self._running.values()
                  if o is not r and o.seq is not None and o.pipe is not None and o.job.priority <= r.job.priority]
        r.wait_for = table.reading(r.job.prompt, has, others)
        return r.wait_for is not None

    def _start_waiting(self) -> None:
        """Start the requests whose shared prefix is read now (or whose reader left)."""
        for r in [r for r in self._running.values() if r.wait_for is not None]:
            seq, n = r.wait_for  # type: ignore[misc]
            src = self._running.get(seq)
            if r.job.cancel.is_set() or src is None or self.reuse.table.held(seq) >= n \
                    or src.job.prompt[:n] != r.job.prompt[:n]:
                r.wait_for = None
                self._start(r)

    def _start(self, r: Run) -> None:
        assert r.seq is not None
        try:
            r.cached = self.reuse.place(r.seq, r.job.prompt)
            r.view = TrackedView(self.reuse, r.seq)
            lease = SeqLease(r.view, r.cached, self.reuse, r.admitted, r.admitted - r.job.submitted, r.job.cancel)
            r.pipe = r.job.make(lease)
        except BaseException as e:  # noqa: BLE001 - a request that cannot start ends with its error
            self._end(r, e)
            return
        r.advance(None, self._end, start=True)

    def _step(self) -> None:
        self._start_waiting()
        if not self.stepper.step(list(self._running.values())):
            with self._cv:  # nothing may run now (requests waiting for a shared prefix): no busy wait
                self._cv.wait(0.005)

    def _end(self, r: Run, error: BaseException | None) -> None:
        r.want = None
        r.handle.end(error)
        with self._cv:
            if r.seq is not None and self._running.get(r.seq) is r:
                del self._running[r.seq]
            self._served += 1
            self._service_s = (self._service_s + [time.perf_counter() - r.job.submitted])[-_RECENT:]
            self._cv.notify_all()

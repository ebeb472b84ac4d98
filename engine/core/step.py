"""One step of the engine core: plan the batch, run it, hand each pipeline its logits.

The plan comes from engine/core/schedule.py (decodes whole, then prompt chunks by
priority under the token budget; the window protected by the share); the batch is
the backend pool's one ``batch`` call, the single place where generation computes.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..errors import Cancelled, ContextFullError, HearthError
from ..inputs.media import run_end, whole
from ..kv.reuse import PREFILL_CHUNK
from ..types import WANT_ALL, WANT_NONE
from .job import Priority, Progress
from .run import AllCancelled, Ended, Run
from .schedule import AGING_S, Share, Want, effective, plan_step

if TYPE_CHECKING:
    from ..backends.base import SeqPool
    from ..kv.reuse import KVReuse


class Stepper:
    """Runs steps over the requests that hold sequences. ``step_tokens``: the step's token budget
    (what a higher-priority arrival may wait for); ``aging_s``: seconds of waiting that raise a
    request by one class."""

    def __init__(self, pool: "SeqPool", reuse: "KVReuse", ended: Ended, *, step_tokens: int = PREFILL_CHUNK,
                 share: Share | None = None) -> None:
        self.pool, self.reuse, self.ended = pool, reuse, ended
        self.step_tokens = step_tokens
        self.share = share or Share()
        self.aging_s = AGING_S
        self.steps = 0

    def rank(self, r: Run, now: float) -> float:
        """``r``'s class now, raised by its wait (lower goes first)."""
        return effective(r.job.priority, now - r.job.submitted, self.aging_s)

    def step(self, running: list[Run]) -> bool:
        """One batch over ``running`` (each with its pipeline waiting); False if nothing could run."""
        for r in [r for r in running if r.job.cancel.is_set()]:
            r.throw(Cancelled("stopped"), self.ended)
        runs = [r for r in running if r.want is not None]
        plan = self._plan(runs)
        if not plan:
            return False
        rows = []
        for r, n in plan:
            c = r.want
            assert c is not None and r.seq is not None
            last = c.done + n == len(c.tokens)
            rows.append((r.seq, c.tokens[c.done:c.done + n], c.want if last else WANT_NONE))
        t0 = time.perf_counter()
        only_prompt = all(r.want is not None and r.want.prompt for r, _n in plan)
        if only_prompt:  # a long chunk stops within milliseconds of Stop (the check costs a decode step)
            self.pool.set_abort(AllCancelled([r for r, _n in plan]))
        try:
            logits = self.pool.batch(rows)
        except HearthError as e:  # Stop inside a prompt's chunk (Cancelled), or the batch failed
            for r, _n in plan:
                r.throw(e if not isinstance(e, Cancelled) else Cancelled("stopped while reading the prompt"),
                        self.ended)
            return True
        finally:
            if only_prompt:
                self.pool.set_abort(None)
        self.steps += 1
        dt = time.perf_counter() - t0
        row_s = dt / max(1, sum(n for _r, n in plan))  # each row's share of the step
        self.share.record(dt, window=any(r.job.priority == Priority.WINDOW for r, _ in plan),
                          others=any(r.job.priority != Priority.WINDOW for r, _ in plan))
        for (r, n), (_seq, tokens, _want), got in zip(plan, rows, logits):
            self._computed(r, n, tokens, got, row_s * n)
        return True

    def _plan(self, runs: list[Run]) -> list[tuple[Run, int]]:
        now = time.perf_counter()
        window = any(r.job.priority == Priority.WINDOW for r in runs)
        wants = [Want(r, self.rank(r, now), len(r.want.tokens) - r.want.done, r.want.prompt,
                      r.job.priority == Priority.WINDOW, r.job.submitted) for r in runs if r.want is not None]
        plan = plan_step(wants, self.step_tokens, others_decode=self.share.allows(window), others_prompts=not window,
                         fit=self._fit)
        return [(r, n) for r, n in plan if self._room(r, n)]

    def _fit(self, r: Run, n: int) -> int:
        """The most tokens up to ``n`` of ``r``'s prompt compute that end outside an image."""
        c = r.want
        assert c is not None
        end = whole(c.tokens, c.done + n)
        if end <= c.done:  # an image starts here and is longer than n
            return 0 if run_end(c.tokens, c.done) - c.done > n else n
        return end - c.done

    def _room(self, r: Run, n: int) -> bool:
        """Whether ``n`` more tokens fit ``r``'s sequence; a request that would overflow it ends."""
        assert r.seq is not None
        if self.pool.seq_len(r.seq) + n <= self.pool.n_ctx:
            return True
        r.throw(ContextFullError(f"context is full ({self.pool.seq_len(r.seq)} + {n} > {self.pool.n_ctx} tokens)"),
                self.ended)
        return False

    def _computed(self, r: Run, n: int, tokens: list[int], logits: Any, spent_s: float) -> None:
        """A step computed ``n`` tokens of ``r``'s pending compute in ``spent_s`` (their rows' share of the
        step): record them, report a prompt's progress, and hand the pipeline its logits once the whole
        compute is done."""
        c = r.want
        assert c is not None and r.seq is not None
        self.reuse.extend(r.seq, tokens)
        c.done += n
        c.spent_s += spent_s
        if c.prompt and r.parked is None:
            r.handle.put(Progress(self.pool.seq_len(r.seq), len(r.job.prompt)))
        if c.done < len(c.tokens):
            return
        if r.parked is not None:  # a preempted request's tokens are back: its pipeline's own compute goes on
            r.want, r.parked = r.parked, None
            return
        if r.job.cancel.is_set():  # Stop came while the step ran: nothing it computed is handed on
            r.throw(Cancelled("stopped"), self.ended)
            return
        r.want = None
        r.advance(logits if c.want != WANT_ALL or logits is None or logits.ndim == 2 else logits[None, :], self.ended)

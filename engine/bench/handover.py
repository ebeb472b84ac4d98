"""``python -m engine bench handover``: decode speed when the model moves from one thread to another.

The window's engine thread loads the model and replies; switching the local
server on hands the model to the scheduler's thread. llama.cpp's OpenMP build
gives each computing thread a libgomp team, and a second team throttles both
(engine/openmp.py). This bench measures the three cases side by side, each
round beginning with a reply on the owner thread (so its team exists):

- ``owner``: the reply on the owner thread itself (the reference);
- ``scheduler``: a Scheduler made on the owner thread, as the window makes it
  (the owner gives back its team first), serving one window-priority reply;
- ``scheduler-kept-team``: the same with the give-back switched off, which is
  how Hearth ran before.

Reported: each mode's decode tok/s per round, the median and its ratio to
``owner``'s. The modes take turns within each of ``--rounds`` rounds, the
order rotating. ``--model``/``--ctx``/``--threads`` as elsewhere.
"""
from __future__ import annotations

import argparse
import queue
import statistics
import threading
from typing import Any, Callable

from ..backends import openmp
from ..prompt.messages import Message
from ..types import SamplingParams

PROMPT = [Message("user", "Write a long story about a lighthouse keeper and the storm that came one winter.")]
MODES = ("owner", "scheduler", "scheduler-kept-team")
REFERENCE = "owner"


class _Owner:
    """A long-lived thread that runs what it is given, like the window's engine thread."""

    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="bench-owner", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, box = job
            try:
                box.put((True, fn()))
            except BaseException as e:  # handed back to the caller
                box.put((False, e))

    def run(self, fn: Callable[[], Any]) -> Any:
        box: queue.Queue = queue.Queue()
        self._jobs.put((fn, box))
        ok, value = box.get()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()


def _tok_s(final) -> float:
    return float(final.stats.decode_tok_s) if final.stats else 0.0


def _on_owner(engine, params: SamplingParams) -> float:
    engine.reset()
    return _tok_s([ev for ev in engine.stream(PROMPT, params) if ev.kind == "final"][0])


def _via_scheduler(owner: _Owner, engine, params: SamplingParams, *, give_back: bool) -> float:
    from ..serve import Priority, Scheduler, ServeRequest

    def make() -> Scheduler:
        engine.reset()
        if give_back:
            return Scheduler(engine, parallel=1)
        kept = openmp.release
        openmp.release = lambda: 0  # the old hand-over: the owner's team stays
        try:
            return Scheduler(engine, parallel=1)
        finally:
            openmp.release = kept

    sched = owner.run(make)
    try:
        ticket = sched.submit(ServeRequest(messages=PROMPT, params=params, priority=Priority.WINDOW))
        return _tok_s([ev for ev in ticket.events() if ev.kind == "final"][0])
    finally:
        sched.close()


def bench_handover(a: argparse.Namespace) -> dict:
    from ..backends.llama.threadpool import default_threads
    from ..backends.llama.threadpool import openmp as has_openmp
    from ..engine import Engine
    from ..config import EngineConfig

    n_threads = a.threads or default_threads()
    n_tokens, rounds = max(2, a.tokens), max(1, a.rounds)
    params = SamplingParams(temperature=0.0, max_tokens=n_tokens, ignore_eos=True)
    warm = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
    owner = _Owner()
    engine = owner.run(lambda: Engine.open(EngineConfig(a.model, n_ctx=a.ctx or 1024, n_threads=n_threads,
                                           cache_budget=0, backend="llama_cpp")))
    tok_s: dict[str, list[float]] = {m: [] for m in MODES}
    try:
        for r in range(rounds):
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                owner.run(lambda: _on_owner(engine, warm))  # the owner computed: its team exists
                if mode == "owner":
                    speed = owner.run(lambda: _on_owner(engine, params))
                else:
                    speed = _via_scheduler(owner, engine, params, give_back=mode == "scheduler")
                tok_s[mode].append(speed)
    finally:
        owner.run(engine.close)
        owner.close()
    medians = {m: statistics.median(v) for m, v in tok_s.items()}
    ref = medians[REFERENCE]
    return {"openmp": has_openmp(), "n_threads": n_threads, "tokens": n_tokens, "rounds": rounds,
            "reference": REFERENCE,
            "modes": {m: {"tok_s": [round(x, 2) for x in tok_s[m]], "median_tok_s": round(medians[m], 2),
                          "ratio": round(medians[m] / ref, 3) if ref else None} for m in MODES}}

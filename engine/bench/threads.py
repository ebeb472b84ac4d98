"""``python -m engine bench threads``: decode speed of each thread option while a window renders beside it.

The window streams a reply on the engine thread while the GUI thread renders
it. Each option of engine/backends/llama/threadpool.py's THREAD_OPTIONS
("cores-1": the physical cores less one; "all": every core; "all-poll0": every
core on Hearth's own llama.cpp thread pool at poll level 0) decodes ``--tokens``
tokens of one greedy reply (``Engine.stream``) while a render load runs on
another Python thread: every 20 ms it holds the GIL for 5 ms of pure-Python
work, as a render does. The options take turns within each of ``--rounds``
rounds (the order rotates), so drift on the machine spreads over all of them.

Reported per option: each round's decode tok/s and their median, the ratio of
that median to "cores-1"'s, and how late the render's frames started (median
over rounds of each round's 95th percentile, ms): the window's smoothness.
``--model``/``--ctx`` as elsewhere; ``--threads`` is not used (the options say).

This wheel's ggml CPU backend may be built with OpenMP (``openmp`` in the
output); there the pool's poll level is unused and libgomp's own wait policy
applies, read once at start-up: run the benchmark again with
OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=0) set to measure that; the
output records both variables.
"""
from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

from ..types import Message, SamplingParams

RENDER_WORK_S = 0.005
RENDER_PERIOD_S = 0.020
PROMPT = [Message("user", "Write a long story about a lighthouse keeper and the storm that came one winter.")]
REFERENCE = "cores-1"


class RenderLoad:
    """A GUI-like load on its own Python thread: ``work_s`` of GIL-holding work every ``period_s``.

    Records how late each frame started against its schedule (a frame that is more
    than a period late is dropped and the schedule restarts, as an event loop does)."""

    def __init__(self, work_s: float = RENDER_WORK_S, period_s: float = RENDER_PERIOD_S) -> None:
        self.work_s, self.period_s = work_s, period_s
        self.late_s: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="render-load", daemon=True)

    def __enter__(self) -> "RenderLoad":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        due = time.perf_counter()
        n = 0
        while not self._stop.is_set():
            now = time.perf_counter()
            self.late_s.append(max(0.0, now - due))
            end = now + self.work_s
            while time.perf_counter() < end:  # pure Python: holds the GIL but for the switch interval
                n += 1
            due = max(due + self.period_s, time.perf_counter() - self.period_s)
            wait = due - time.perf_counter()
            if wait > 0:
                self._stop.wait(wait)


def p95(xs: list[float]) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.95 * len(s)))]


def summarise(tok_s: dict[str, list[float]], late_p95_ms: dict[str, list[float]],
              reference: str = REFERENCE) -> dict[str, dict]:
    """Each option's rounds, median tok/s, ratio of its median to the reference's, and render lateness."""
    medians = {k: statistics.median(v) for k, v in tok_s.items() if v}
    ref = medians.get(reference)
    return {k: {"tok_s": [round(x, 2) for x in v], "median_tok_s": round(medians[k], 2),
                f"ratio_vs_{reference}": round(medians[k] / ref, 3) if ref else None,
                "render_late_p95_ms": round(statistics.median(late_p95_ms[k]), 2) if late_p95_ms.get(k) else None}
            for k, v in tok_s.items() if v}


def _decode_tok_s(engine, params: SamplingParams) -> float:
    engine.reset()
    final = [ev for ev in engine.stream(PROMPT, params) if ev.kind == "final"][0]
    return float(final.stats.decode_tok_s) if final.stats else 0.0


def run(a: argparse.Namespace) -> dict:
    from ..backends.llama.threadpool import THREAD_OPTIONS, default_threads, openmp, thread_option
    from ..engine import Engine

    cores = default_threads()
    choices = {name: thread_option(name, cores) for name in THREAD_OPTIONS}
    n_tokens, rounds = max(2, a.tokens), max(1, a.rounds)
    params = SamplingParams(temperature=0.0, max_tokens=n_tokens, ignore_eos=True)
    engines = {}
    try:
        for name, c in choices.items():
            engines[name] = Engine.load(a.model, n_ctx=a.ctx or 1024, n_threads=c.n_threads,
                                        threads_poll=c.poll, cache_budget=0, backend="llama_cpp")
            _decode_tok_s(engines[name], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))  # warm
        tok_s: dict[str, list[float]] = {k: [] for k in choices}
        late: dict[str, list[float]] = {k: [] for k in choices}
        names = list(choices)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                with RenderLoad() as render:
                    tok_s[name].append(_decode_tok_s(engines[name], params))
                late[name].append(p95(render.late_s) * 1e3)
    finally:
        for e in engines.values():
            e.close()
    out = summarise(tok_s, late)
    for name, c in choices.items():
        out[name].update(n_threads=c.n_threads, threads_poll=c.poll)
    return {"physical_cores": cores, "openmp": openmp(), "tokens": n_tokens, "rounds": rounds,
            "render": {"work_ms": RENDER_WORK_S * 1e3, "period_ms": RENDER_PERIOD_S * 1e3},
            "env": {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")},
            "reference": REFERENCE, "options": out}

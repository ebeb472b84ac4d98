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
that median to "cores-1"'s, and the window's smoothness: how late the render's
frames started (median over rounds of each round's 95th percentile, ms; a frame
a period late is dropped, so this tops out near 20) and the share of the frames
due that were drawn (median over rounds).
``--model``/``--ctx`` as elsewhere; ``--threads`` is not used (the options say).

``--rows`` picks some of the options (comma-separated).

This wheel's ggml CPU backend may be built with OpenMP (``openmp`` in the
output); there the pool's poll level is unused: libgomp's threads wait as
OMP_WAIT_POLICY / GOMP_SPINCOUNT say, read once when libgomp loads. So on
an OpenMP build with neither variable set, one more option, "all-omp-passive"
(every core, OMP_WAIT_POLICY=passive), is measured in a child process each
round (its own model load and render load); the output records both variables.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..prompt.messages import Message
from ..types import SamplingParams

RENDER_WORK_S = 0.005
RENDER_PERIOD_S = 0.020
PROMPT = [Message("user", "Write a long story about a lighthouse keeper and the storm that came one winter.")]
REFERENCE = "cores-1"
PASSIVE = "all-omp-passive"
_OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


class RenderLoad:
    """A GUI-like load on its own Python thread: ``work_s`` of GIL-holding work every ``period_s``.

    Records how late each frame started against its schedule (a frame that is more
    than a period late is dropped and the schedule restarts, as an event loop does)."""

    def __init__(self, work_s: float = RENDER_WORK_S, period_s: float = RENDER_PERIOD_S) -> None:
        self.work_s, self.period_s = work_s, period_s
        self.late_s: list[float] = []
        self.elapsed_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="render-load", daemon=True)

    def __enter__(self) -> "RenderLoad":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def frame_ratio(self) -> float:
        """Frames drawn over frames due in the time it ran."""
        due = self.elapsed_s / self.period_s
        return min(1.0, len(self.late_s) / due) if due >= 1 else 1.0

    def _loop(self) -> None:
        start = due = time.perf_counter()
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
        self.elapsed_s = time.perf_counter() - start


def p95(xs: list[float]) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.95 * len(s)))]


def _median(xs: list[float] | None, digits: int) -> float | None:
    return round(statistics.median(xs), digits) if xs else None


def summarise(tok_s: dict[str, list[float]], late_p95_ms: dict[str, list[float]],
              frames: dict[str, list[float]] | None = None, reference: str = REFERENCE) -> dict[str, dict]:
    """Each option's rounds, median tok/s, ratio of its median to the reference's, and the render's figures."""
    medians = {k: statistics.median(v) for k, v in tok_s.items() if v}
    ref = medians.get(reference)
    return {k: {"tok_s": [round(x, 2) for x in v], "median_tok_s": round(medians[k], 2),
                f"ratio_vs_{reference}": round(medians[k] / ref, 3) if ref else None,
                "render_late_p95_ms": _median(late_p95_ms.get(k), 2),
                "render_frame_ratio": _median((frames or {}).get(k), 3)}
            for k, v in tok_s.items() if v}


def _decode_tok_s(engine, params: SamplingParams) -> float:
    engine.reset()
    final = [ev for ev in engine.stream(PROMPT, params) if ev.kind == "final"][0]
    return float(final.stats.decode_tok_s) if final.stats else 0.0


def _passive_round(a: argparse.Namespace, n_tokens: int) -> tuple[float, float, float]:
    """One round of "all" in a child process whose libgomp waits passively: tok/s, render p95 ms, frames."""
    cmd = [sys.executable, "-m", "engine", "bench", "threads", "--rows", "all", "--rounds", "1",
           "--tokens", str(n_tokens), "--json"]
    for flag, value in (("--model", a.model), ("--ctx", a.ctx)):
        if value is not None:
            cmd += [flag, str(value)]
    root = str(Path(__file__).resolve().parents[2])  # the folder holding this engine package
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])["options"]["all"]
    return row["tok_s"][0], row["render_late_p95_ms"], row["render_frame_ratio"]


def bench_threads(a: argparse.Namespace) -> dict:
    from ..backends.llama.threadpool import THREAD_OPTIONS, default_threads, openmp, thread_option
    from ..engine import Engine
    from ..config import EngineConfig
    from ..errors import HearthError

    cores = default_threads()
    rows = [r.strip() for r in (getattr(a, "rows", None) or "").split(",") if r.strip()]
    for r in rows:
        if r not in THREAD_OPTIONS:
            raise HearthError(f"unknown thread option {r!r}; choose from {', '.join(THREAD_OPTIONS)}")
    choices = {name: thread_option(name, cores) for name in rows or THREAD_OPTIONS}
    passive = not rows and openmp() and not any(os.environ.get(k) for k in _OMP_VARS)
    n_tokens, rounds = max(2, a.tokens), max(1, a.rounds)
    params = SamplingParams(temperature=0.0, max_tokens=n_tokens, ignore_eos=True)
    engines = {}
    try:
        for name, c in choices.items():
            engines[name] = Engine.open(EngineConfig(a.model, n_ctx=a.ctx or 1024, n_threads=c.n_threads,
                                        threads_poll=c.poll, cache_budget=0, backend="llama_cpp"))
            _decode_tok_s(engines[name], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))  # warm
        names = list(choices) + ([PASSIVE] if passive else [])
        tok_s: dict[str, list[float]] = {k: [] for k in names}
        late: dict[str, list[float]] = {k: [] for k in names}
        frames: dict[str, list[float]] = {k: [] for k in names}
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                if name == PASSIVE:
                    speed, late_ms, ratio = _passive_round(a, n_tokens)
                else:
                    with RenderLoad() as render:
                        speed = _decode_tok_s(engines[name], params)
                    late_ms, ratio = p95(render.late_s) * 1e3, render.frame_ratio
                tok_s[name].append(speed)
                late[name].append(late_ms)
                frames[name].append(ratio)
    finally:
        for e in engines.values():
            e.close()
    out = summarise(tok_s, late, frames)
    for name, c in choices.items():
        out[name].update(n_threads=c.n_threads, threads_poll=c.poll)
    if passive:
        out[PASSIVE].update(n_threads=cores, threads_poll=None, env={"OMP_WAIT_POLICY": "PASSIVE"})
    return {"physical_cores": cores, "openmp": openmp(), "tokens": n_tokens, "rounds": rounds,
            "render": {"work_ms": RENDER_WORK_S * 1e3, "period_ms": RENDER_PERIOD_S * 1e3},
            "env": {k: os.environ.get(k) for k in _OMP_VARS},
            "reference": REFERENCE, "options": out}

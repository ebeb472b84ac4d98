"""One thread computes: the engine core's, whoever asks for a reply (the window's engine thread, the
local server's readers). A thread that computed anyway (a benchmark's bare loop) gives back its OpenMP
team when another takes over the model (engine/openmp.py).

Without it libgomp keeps the first thread's idle team and, with more threads than cores,
throttles every team (the server switched on after a reply decoded at 28 instead of ~88
tokens/s on 2 cores). The speed is a benchmark's business; what a test can check
exactly is the cause: the idle workers are gone, and replies stay the same.
"""
from __future__ import annotations

import queue
import threading
import time

import psutil
import pytest

from engine import Message, SamplingParams
from engine.backends import openmp
from engine.backends.llama import threadpool
from engine.engine import Engine
from engine.config import EngineConfig
from engine.serve import Priority, Scheduler, ServeRequest

GREEDY = SamplingParams(max_tokens=8, temperature=0.0)
HELLO = [Message("user", "Say hello.")]


class _Owner:
    """A long-lived thread that runs what it is given, like the window's engine thread."""

    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="owner", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, box = job
            try:
                box.put((True, fn()))
            except BaseException as e:  # handed back to the caller
                box.put((False, e))

    def run(self, fn):
        box: queue.Queue = queue.Queue()
        self._jobs.put((fn, box))
        ok, value = box.get(timeout=120)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()


def _threads() -> int:
    return psutil.Process().num_threads()


def _settles_at(expected: int, timeout: float = 10.0) -> int:
    """The thread count once exiting threads are gone (they leave as the kernel gets to them)."""
    end = time.monotonic() + timeout
    n = _threads()
    while n != expected and time.monotonic() < end:
        time.sleep(0.02)
        n = _threads()
    return n


def _reply(engine: Engine) -> str:
    return next(ev for ev in engine.stream(HELLO, GREEDY) if ev.kind == "final").text


@pytest.fixture()
def owned(bundled_path):
    owner = _Owner()
    engine = owner.run(lambda: Engine.open(EngineConfig(bundled_path, n_ctx=1024, n_threads=2)))
    yield owner, engine
    owner.run(engine.close)
    owner.close()


def test_the_wheel_runs_openmp_and_pause_is_there():
    # Set-up builds llama.cpp with OpenMP on Linux; the fix matters exactly there.
    assert threadpool.openmp()
    assert openmp.loaded()


def test_release_ends_the_calling_threads_idle_team(owned):
    owner, engine = owned
    before = _threads()
    tok = engine.backend.tokenize("Hello")

    def compute() -> None:  # a bare forward on the owner's thread (a benchmark's, a measurement's)
        engine.backend.forward(tok)
        engine.backend.truncate(0)
    owner.run(compute)
    with_team = _threads()
    assert with_team == before + 1  # the owner plus one libgomp worker, kept idle
    assert owner.run(openmp.release) >= 1
    assert _settles_at(before) == before


def test_every_reply_computes_on_the_cores_one_thread_whoever_asks(owned):
    owner, engine = owned
    before = _threads()
    first = owner.run(lambda: _reply(engine))  # the window's engine thread asks
    # one team in the process: the engine core's (its thread was there before; one worker now)
    assert _threads() == before + 1
    sched = owner.run(lambda: Scheduler(engine, parallel=1))  # the local server goes on
    try:
        ticket = sched.submit(ServeRequest(messages=HELLO, params=GREEDY, priority=Priority.INTERACTIVE))
        final = [ev for ev in ticket.events() if ev.kind == "final"][0]  # read on this thread
        assert final.text == first
        assert _reply(engine) == first
        assert _threads() == before + 1  # still the one team: no second one for another caller's thread
    finally:
        sched.close()


def test_release_on_a_thread_that_never_computed_is_harmless():
    box: list[int] = []
    t = threading.Thread(target=lambda: box.append(openmp.release()))
    t.start()
    t.join()
    assert box and box[0] >= 0



def test_the_window_gives_back_the_engine_threads_team_before_a_benchmark(qtbot, make_window):
    """"Benchmark this model" measures on its own thread: the engine thread, which has just
    replied, gives back its idle team first (else the benchmark ran throttled)."""
    from test_app_window import type_and_enter, wait_reply

    w = make_window(max_tokens=4, temperature=0.0)
    type_and_enter(w, "Hello")
    wait_reply(qtbot, w)
    # The engine thread has computed (at load, auto measured what verifying drafts costs;
    # then the reply): it holds its team, one idle libgomp worker.
    team = _threads()
    w.performance.open_benchmark()
    dlg = w.performance.tune_dialog
    assert dlg is not None
    runs: list[int] = []
    real = dlg._before_run
    dlg._before_run = lambda: (runs.append(1), real())  # type: ignore[assignment]
    dlg.start()  # the benchmark's thread loads its own copy of the model; the release comes first
    assert runs == [1]
    dlg.done(0)  # stop the run and end its thread (whose own team goes with it)
    # the engine thread's team was given back
    qtbot.waitUntil(lambda: _threads() <= team - 1, timeout=30_000)

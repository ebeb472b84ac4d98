"""``python -m app --bench-stream``: a reply's speed through the real window against the engine alone.

One model is loaded the normal way (the window's settings, its engine thread;
draft off, the context on Auto, the threads as asked or as the app's Auto rule
gives). The same prompt is then streamed, greedy and with end-of-turn ignored
so that both sides write exactly ``tokens`` tokens, ``rounds`` times through the
real window (offscreen: the input box, Enter, the engine thread, the store, the
chat's rendering) and ``rounds`` times straight through ``Engine.stream`` on that
same loaded engine, alternating, so a machine that gets busier slows both alike.
One unmeasured reply on each side comes first (the first prefill, first-use
costs). Nothing else runs meanwhile: the window is idle (its event loop waits)
while the engine side runs, on the engine thread like the window's replies
(see _Direct for why it must be that thread).

Both speeds are the engine's own decode tok/s (GenerationStats, the same
definition on both sides); the window's is read from its reply's final event.
Per window reply it also measures the GUI thread's CPU time over the reply's
wall time (``time.thread_time()`` read on the GUI thread as Enter is pressed and
as the final event has been handled) and the event loop's worst lateness, as
the self-test does (app/ui/loop_monitor.py's "streaming" phase). Medians are
reported, the per-round figures beside them. Settings and conversations go to
a scratch data folder (app/__main__.py), never the user's.
"""
from __future__ import annotations

import json
import statistics
import time

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtTest import QTest

from engine import Message, SamplingParams
from engine.loading import AUTO

from app.core.settings import Settings, SettingsFile
from app.window.selftest import _start_window, wait_until

PROMPT = "Tell me a long story about a lighthouse keeper and the ships she guides home."
SETTLE_S = 0.1  # after each window reply: the monitor's phase lingers a few ticks past the end (as in the self-test)


def _settings(model: str, tokens: int, threads: int, poll: int | None) -> Settings:
    s = Settings(model=model, draft="none", n_threads=threads, threads_poll=AUTO if poll is None else poll)
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": tokens})
    return s


def _window_reply(win, prompt: str, timeout_s: float) -> dict:
    """One reply through the window: type into a new chat, press Enter, wait for the final
    event. Returns its text and metrics, the GUI thread's CPU share and the worst loop gap."""
    win.new_conversation()
    wait_until(lambda: False, SETTLE_S)  # the new chat is drawn before the clock starts
    win.monitor.reset("streaming")
    end: dict = {}

    def finished(_mid: int, result: dict) -> None:  # after the window's own handler (connected first)
        end.update(wall=time.perf_counter(), cpu=time.thread_time(), result=result)

    win.host.finished.connect(finished)
    try:
        win.chat.input.setPlainText(prompt)
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        QTest.keyClick(win.chat.input, Qt.Key.Key_Return)
        job = win.host.job
        if job is None:
            raise RuntimeError("the message was not sent: " + " | ".join(win.info.messages()))
        request = (list(job.messages), job.params)
        if not wait_until(lambda: bool(end), timeout_s):
            raise RuntimeError(f"no reply within {timeout_s:.0f} s")
    finally:
        win.host.finished.disconnect(finished)
    wait_until(lambda: False, SETTLE_S)
    result, m = end["result"], end["result"].get("metrics") or {}
    return {"text": result["text"], "finish_reason": result["finish_reason"], "metrics": m,
            "request": request, "gui_cpu_fraction": (end["cpu"] - cpu0) / (end["wall"] - wall0),
            "worst_gap_ms": win.monitor.worst_ms.get("streaming", 0.0)}


class _Direct(QObject):
    """Runs Engine.stream on the engine thread, where the window's replies run too.

    It must be that thread: llama.cpp's CPU backend here is built with OpenMP, and
    libgomp keeps a team of workers per thread that ever computed. Once the process
    holds more of those threads than it has cores, every barrier sleeps instead of
    spinning (libgomp's throttled spin), and two threads decode 3x slower than one
    (measured: 28 against 85 tok/s on the bundled model, 2 cores). Calling the engine
    from the GUI thread would measure that, not the window."""

    run = Signal(object, object)

    def __init__(self, engine) -> None:
        super().__init__()
        self.engine = engine
        self.result: dict | None = None
        self.run.connect(self._run)

    @Slot(object, object)
    def _run(self, messages: list[Message], params: SamplingParams) -> None:
        final = None
        try:
            for ev in self.engine.stream(messages, params):
                if ev.kind == "final":
                    final = ev
        finally:
            if final is None:
                self.result = {"error": "the engine ended the reply without a final event"}
            else:
                self.result = {"text": final.text, "finish_reason": final.finish_reason,
                               "metrics": final.stats.as_dict()}


def _engine_reply(direct: _Direct, messages: list[Message], params: SamplingParams,
                  timeout_s: float) -> dict:
    """One reply straight through Engine.stream on the engine thread, the window idle."""
    direct.result = None
    direct.run.emit(messages, params)
    if not wait_until(lambda: direct.result is not None, timeout_s):
        raise RuntimeError(f"the engine did not finish a reply within {timeout_s:.0f} s")
    result = direct.result or {}
    if "error" in result:
        raise RuntimeError(result["error"])
    return result


def _side(replies: list[dict]) -> dict:
    m = [r["metrics"] for r in replies]
    return {"decode_tok_s": [round(x["decode_tok_s"], 2) for x in m],
            "generated_tokens": [x["generated_tokens"] for x in m],
            "ttft_ms": [round(x["ttft_ms"], 1) for x in m], "e2e_ms": [round(x["e2e_ms"], 1) for x in m],
            "finish_reason": [r["finish_reason"] for r in replies]}


def run(model: str = "bundled", tokens: int = 256, threads: int | None = None, rounds: int = 3,
        poll: int | None = None, prompt: str = PROMPT, timeout_s: float = 600.0) -> dict:
    """Warm up, then alternate window and engine replies ``rounds`` times; the figures as a dict.
    Needs a QApplication and a scratch data folder (HEARTH_DATA_DIR)."""
    from app.bridge.load_runner import app_threads

    if threads is None:  # the app's Auto rule, its pool's poll level included unless one is asked for
        threads, auto_poll = app_threads()
        poll = auto_poll if poll is None else poll
    SettingsFile().save(_settings(model, tokens, threads, poll))
    win = None
    try:
        win, *_ = _start_window()
        # End-of-turn ignored in what the window sends (ignore_eos is for benchmarks only, so no setting).
        win.replies.reply_settings.fixed = {"ignore_eos": True}
        # The larger-model hint runs once after the load, on a thread: let it finish first.
        wait_until(lambda: win.welcome_hint.answered == win.welcome_hint.loads, 60.0)
        # The same engine, same settings, idle between the window's replies; run on its own thread.
        runner = _Direct(win.host.shared.engine)
        win.host.run_on_engine_thread(runner)
        messages, params = [Message("user", prompt)], win.replies.reply_settings.params(None)
        problems: list[str] = []
        window, direct = [], []
        for i in range(rounds + 1):  # the first pair warms up and is not counted
            w = _window_reply(win, prompt, timeout_s)
            e = _engine_reply(runner, messages, params, timeout_s)
            if w["request"] != (messages, params):
                problems.append("the window sent another request than the engine's")
            if i:
                window.append(w)
                direct.append(e)
        for side, replies in (("window", window), ("engine", direct)):
            counts = [r["metrics"]["generated_tokens"] for r in replies]
            if any(n != tokens for n in counts):
                problems.append(f"the {side} wrote {counts} tokens, not {tokens}")
        if any(w["text"] != e["text"] for w, e in zip(window, direct)):
            problems.append("the window's reply and the engine's differ")
        w_tok = statistics.median(r["metrics"]["decode_tok_s"] for r in window)
        e_tok = statistics.median(r["metrics"]["decode_tok_s"] for r in direct)
        loaded = win.host.model
        local = loaded.local
        assert local is not None  # the window's own engine, here: the bench compares it with itself
        return {
            "ok": not problems, "problems": problems,
            "window_tok_s": round(w_tok, 2), "engine_tok_s": round(e_tok, 2),
            "ratio": round(w_tok / e_tok, 3) if e_tok else 0.0,
            "gui_cpu_fraction": round(statistics.median(r["gui_cpu_fraction"] for r in window), 3),
            "worst_gap_ms": round(statistics.median(r["worst_gap_ms"] for r in window), 1),
            "model": loaded.label, "tokens": tokens, "threads": local.n_threads,
            "threads_poll": local.threads_poll, "rounds": rounds,
            "n_ctx": loaded.n_ctx, "draft": local.draft, "prompt": prompt,
            "window": {**_side(window), "gui_cpu_fraction": [round(r["gui_cpu_fraction"], 3) for r in window],
                       "worst_gap_ms": [round(r["worst_gap_ms"], 1) for r in window]},
            "engine": _side(direct),
            "same_text": all(w["text"] == e["text"] for w, e in zip(window, direct)), "profile": local.exactness,
            "window_text": window[-1]["text"], "engine_text": direct[-1]["text"],
        }
    finally:
        if win is not None:
            win.close()


def main(model: str = "bundled", tokens: int = 256, threads: int | None = None, rounds: int = 3,
         poll: int | None = None) -> int:
    """Print one JSON object; 0 when both sides wrote exactly ``tokens`` tokens of the same text."""
    try:
        result = run(model, tokens, threads, rounds, poll)
    except Exception as e:  # the one object must still come out, saying what went wrong
        result = {"ok": False, "problems": [f"{type(e).__name__}: {e}"]}
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1

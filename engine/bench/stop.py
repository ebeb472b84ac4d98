"""``python -m engine bench stop``: how fast Stop takes effect during a long
prefill, and whether the engine's next reply then equals a fresh one.

A prompt of ``--tokens`` tokens (default 8000) is prefilled; Stop is pressed
after 0.5 s, 2 s, 8 s... (``--rounds`` points, spread over the prefill). The
latency is Stop pressed -> the final event handed to the caller. At the end
the same prompt is answered in full on the stopped engine and on a fresh one;
``identical`` says whether the two replies match token for token.
"""
from __future__ import annotations

import argparse
import threading
import time

from ..types import Message, SamplingParams, StreamEvent

SENTENCE = "The keeper climbed the spiral stairs at dusk, counting every step, and lit the lamp again. "


def _conversation(engine, n_tokens: int) -> list[Message]:
    """A system prompt of about ``n_tokens`` tokens, then a short question."""
    per = len(engine.backend.tokenize(SENTENCE, special=False))
    system = SENTENCE * max(1, n_tokens // per)
    return [Message("system", system), Message("user", "How many times was the lamp lit?")]


def _stopped_after(engine, messages, delay_s: float, params: SamplingParams) -> dict:
    cancel = threading.Event()
    pressed: list[float] = []
    last_progress = [0]

    def press() -> None:
        pressed.append(time.perf_counter())
        cancel.set()

    timer = threading.Timer(delay_s, press)
    timer.start()
    final: StreamEvent | None = None
    for ev in engine.stream(messages, params, cancel=cancel,
                            progress=lambda done, total: last_progress.__setitem__(0, done)):
        if ev.kind == "final":
            final = ev
    ended = time.perf_counter()
    timer.cancel()
    assert final is not None
    if not pressed:  # the prefill finished before Stop was pressed
        return {"delay_s": delay_s, "stopped": False}
    return {"delay_s": delay_s, "stopped": final.finish_reason == "cancelled",
            "latency_ms": round((ended - pressed[0]) * 1e3, 2), "prompt_tokens_read": last_progress[0],
            "finish_reason": final.finish_reason}


def run(a: argparse.Namespace) -> dict:
    from ..engine import Engine

    n_tokens = a.tokens if a.tokens and a.tokens > 256 else 8000
    n_ctx = n_tokens + 1024
    engine = Engine.load(a.model, n_ctx=n_ctx, n_threads=a.threads, cache_budget=0)
    messages = _conversation(engine, n_tokens)
    prompt_len = len(engine.prompt_tokens(messages))
    params = SamplingParams(temperature=0.0, max_tokens=16)
    # Stop points spread over the prefill: 0.5 s, then doubling.
    delays = [0.5 * 2 ** i for i in range(max(1, a.rounds))]
    rows = []
    for d in delays:
        engine.reset()
        rows.append(_stopped_after(engine, messages, d, params))
    latencies = [r["latency_ms"] for r in rows if r.get("stopped")]
    # The next reply after all those stops, against a fresh engine's.
    after = [ev for ev in engine.stream(messages, params) if ev.kind == "final"][0]
    engine.close()
    fresh_engine = Engine.load(a.model, n_ctx=n_ctx, n_threads=a.threads, cache_budget=0)
    fresh = [ev for ev in fresh_engine.stream(messages, params) if ev.kind == "final"][0]
    fresh_engine.close()
    return {
        "prompt_tokens": prompt_len,
        "stops": rows,
        "max_latency_ms": max(latencies) if latencies else None,
        "bar_ms": 300,
        "meets_bar": bool(latencies) and max(latencies) <= 300,
        "identical": after.token_ids == fresh.token_ids,
        "full_prefill_ms": round(after.stats.prefill_ms, 1) if after.stats else None,
    }

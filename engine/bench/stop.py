"""``python -m engine bench stop``: how fast Stop takes effect during a long
prefill, and whether the engine's next reply then equals a fresh one.

A prompt of ``--tokens`` tokens (default 8000) is prefilled; Stop is pressed
when the prefill has read 12%, 37%, 62%, 87%... of it (``--rounds`` points,
spread evenly over the prefill). A watcher thread presses it, as the window's
Stop button would, at whatever moment inside a chunk the threshold is passed.
The latency is Stop pressed -> the final event handed to the caller. At the end
the same prompt is answered in full on the stopped engine and on a fresh one;
``identical`` says whether the two replies match token for token.
"""
from __future__ import annotations

import argparse
import threading
import time

from ..prompt.messages import Message
from ..types import SamplingParams, StreamEvent

SENTENCE = "The keeper climbed the spiral stairs at dusk, counting every step, and lit the lamp again. "


def _conversation(engine, n_tokens: int) -> list[Message]:
    """A system prompt of about ``n_tokens`` tokens, then a short question."""
    per = len(engine.backend.tokenize(SENTENCE, special=False))
    system = SENTENCE * max(1, n_tokens // per)
    return [Message("system", system), Message("user", "How many times was the lamp lit?")]


def _stopped_after(engine, messages, fraction: float, params: SamplingParams) -> dict:
    """Stop the reply once the prefill has read ``fraction`` of the prompt; how long it took to end."""
    cancel = threading.Event()
    pressed: list[float] = []
    read = [0, 0]  # tokens read so far, total to read
    done = threading.Event()

    def watch() -> None:  # polls like a user watching the progress bar, off the engine's thread
        while not done.is_set():
            if read[1] and read[0] >= fraction * read[1]:
                pressed.append(time.perf_counter())
                cancel.set()
                return
            time.sleep(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    final: StreamEvent | None = None
    for ev in engine.stream(messages, params, cancel=cancel,
                            progress=lambda n, total: read.__setitem__(slice(0, 2), [n, total])):
        if ev.kind == "final":
            final = ev
    ended = time.perf_counter()
    done.set()
    watcher.join()
    assert final is not None
    row = {"fraction": round(fraction, 3), "stopped": final.finish_reason == "cancelled",
           "prompt_tokens_read": read[0], "finish_reason": final.finish_reason}
    if pressed:
        row["latency_ms"] = round((ended - pressed[0]) * 1e3, 2)
    return row


def bench_stop(a: argparse.Namespace) -> dict:
    from ..engine import Engine
    from ..config import EngineConfig

    n_tokens = a.tokens if a.tokens and a.tokens > 256 else 8000
    n_ctx = n_tokens + 1024
    engine = Engine.open(EngineConfig(a.model, n_ctx=n_ctx, n_threads=a.threads, cache_budget=0))
    messages = _conversation(engine, n_tokens)
    prompt_len = len(engine.prompt_tokens(messages))
    params = SamplingParams(temperature=0.0, max_tokens=16)
    # Stop points spread evenly over the prefill.
    n = max(1, a.rounds)
    rows = []
    for i in range(n):
        engine.reset()
        rows.append(_stopped_after(engine, messages, (i + 0.5) / n, params))
    latencies = [r["latency_ms"] for r in rows if r.get("stopped")]
    # The next reply after all those stops, against a fresh engine's.
    after = [ev for ev in engine.stream(messages, params) if ev.kind == "final"][0]
    engine.close()
    fresh_engine = Engine.open(EngineConfig(a.model, n_ctx=n_ctx, n_threads=a.threads, cache_budget=0))
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

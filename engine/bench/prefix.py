"""``python -m engine bench prefix``: TTFT with a long system prompt cold,
served from the prefix cache, and on a cache miss (the miss's overhead).

Its limit is measured in the same run: the warm request's new tokens (its
question and the template around it) read alone on top of the system prompt the
sequence holds, and the first token chosen: one forward on the engine core's
thread, nothing else (no template, tokenizer, queue, restore or reply events).
Warm (a snapshot in memory) and restart (a snapshot on disk, a new engine) are
printed against it, with where the time between goes: each reply's own figures
(prefill, template, tokenize, queue)."""
from __future__ import annotations

import argparse
import statistics
from typing import Any

from ..prompt.messages import Message
from ..types import SamplingParams, StreamEvent


def _ttft(engine, messages, max_tokens: int = 1) -> tuple[float, StreamEvent]:
    for ev in engine.stream(messages, SamplingParams(temperature=0.0, max_tokens=max_tokens)):
        if ev.kind == "final" and ev.stats is not None:
            return ev.stats.ttft_ms, ev
    raise RuntimeError("no final event")


def bench_prefix(a: argparse.Namespace) -> dict:
    """TTFT with a long system prompt (``--system-file``, default the ~1.5k-token
    one in engine/data) cold, cached, cache-missing, and after a restart (disk)."""
    from importlib.resources import files
    from pathlib import Path

    from ..engine import Engine
    from ..config import EngineConfig

    path = getattr(a, "system_file", None)
    system = Path(path).read_text() if path else files("engine").joinpath("data/system_prompt_long.txt").read_text()
    probe = Engine.open(EngineConfig(a.model, n_ctx=512, n_threads=a.threads, backend=a.backend, cache_budget=0))
    system_tokens = len(probe.backend.tokenize(system, special=False))
    n_ctx = max(4096, system_tokens + 1024)
    probe.close()
    kw: dict[str, Any] = dict(n_ctx=n_ctx, n_threads=a.threads, backend=a.backend)
    on = Engine.open(EngineConfig(a.model, **kw))
    off = Engine.open(EngineConfig(a.model, cache_budget=0, **kw))
    users = ["Hi!", "Hello?", "Hey there.", "Good morning!", "Any news?", "Help me."]
    conv = lambda u: [Message("system", system), Message("user", u)]  # noqa: E731
    disabled, miss, warm, limit = [], [], [], []
    parts: dict[str, list[dict[str, float]]] = {"warm": []}
    for i in range(a.rounds):
        off.reset()
        disabled.append(_ttft(off, conv(users[i % len(users)]))[0])
        on.cache.clear()
        on.reset()
        miss.append(_ttft(on, conv(users[i % len(users)]))[0])
        on.reset()  # the live KV is gone; only the cached snapshot can serve
        t, ev = _ttft(on, conv(users[(i + 1) % len(users)]))
        assert ev.stats is not None and ev.stats.cached_tokens >= system_tokens, ev.stats
        warm.append(t)
        parts["warm"].append(_parts(ev))
        limit.append(_new_tokens_alone(on, on.prompt_tokens(conv(users[(i + 1) % len(users)])),
                                       ev.stats.cached_tokens))
    # A scripted three-turn conversation: the third turn should prefill only its
    # own message and the template tokens around it.
    on.cache.clear()
    on.reset()
    msgs = conv("Name one planet.")
    for follow in ("Name another.", "And a third?"):
        ev = _ttft(on, msgs, max_tokens=48)[1]
        msgs = msgs + [Message("assistant", ev.text), Message("user", follow)]
        kv_after_reply = len(on.kv.kv_tokens(0))
    ev3 = _ttft(on, msgs)[1]
    assert ev3.stats is not None
    new_tokens = len(on.prompt_tokens(msgs)) - kv_after_reply
    restart, restart_parts = _after_restart(Engine, a.model, kw, conv(users[0]), conv(users[1]), a.rounds)
    cold, w, lim = statistics.median(disabled), statistics.median(warm), statistics.median(limit)
    prompt_tokens = len(on.prompt_tokens(conv(users[0])))
    result = {
        "backend": a.backend,
        "system_prompt_tokens": prompt_tokens,
        "cold_ttft_ms": round(cold, 2),
        "limit_ttft_ms": round(lim, 2),
        "warm_ttft_ms": round(w, 2),
        "warm_vs_limit": round(w / lim, 3),
        "speedup": round(cold / w, 1),
        "speedup_limit": round(cold / lim, 1),
        "miss_overhead_ratio": round(statistics.median(miss) / cold, 4),
        "restart_ttft_ms": round(restart, 2),
        "restart_vs_limit": round(restart / lim, 3),
        "restart_speedup": round(cold / restart, 1),
        # Each reply's own figures (ms, medians): the time between the limit and warm or restart is in them.
        "where": {k: _median_parts(v) for k, v in {**parts, "restart": restart_parts}.items()},
        "turn3_prefill_tokens": ev3.stats.prefill_tokens,
        "turn3_new_message_and_template_tokens": new_tokens,
        "cache": on.cache_stats(),
        "rounds": a.rounds,
        "cold_all": [round(x, 1) for x in disabled],
        "miss_all": [round(x, 1) for x in miss],
        "warm_all": [round(x, 1) for x in warm],
        "limit_all": [round(x, 1) for x in limit],
    }
    on.close()
    off.close()
    return result


def _new_tokens_alone(engine, prompt: list[int], cached: int) -> float:
    """ms to read ``prompt[cached:]`` on top of the ``cached`` tokens the engine's sequence holds, and
    choose the first token (argmax): the warm request's own compute, on the core's thread."""
    import time

    import numpy as np

    def run() -> float:
        pool = engine.kv.pool
        pool.seq_truncate(0, cached)
        t0 = time.perf_counter()
        logits = pool.batch([(0, prompt[cached:], 1)])[0]
        int(np.argmax(logits))
        ms = (time.perf_counter() - t0) * 1e3
        pool.seq_truncate(0, cached)
        engine.kv.commit(0, prompt)  # what the sequence holds now, for the next request's placement
        return ms
    return engine.core.call(run)


def _parts(ev: StreamEvent) -> dict[str, float]:
    """Where a reply's TTFT went, from its own figures (ms)."""
    st = ev.stats
    assert st is not None
    return {"ttft": st.ttft_ms, "template": st.template_ms, "tokenize": st.tokenize_ms,
            "queue_wait": st.queue_wait_ms, "prefill": st.prefill_ms, "prefill_tokens": float(st.prefill_tokens)}


def _median_parts(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]} if runs else {}


def _after_restart(engine_cls, model, kw: dict[str, Any], first: list[Message], second: list[Message],
                   rounds: int) -> tuple[float, list[dict[str, float]]]:
    """TTFT of a new question after a restart (the median of ``rounds``): one engine answers ``first``
    with the disk store on and closes; a new engine on the same folder answers ``second``."""
    import tempfile

    from ..config import EngineConfig

    times, parts = [], []
    with tempfile.TemporaryDirectory(prefix="hearth-bench-disk-") as tmp:
        e = engine_cls.open(EngineConfig(model, disk_cache=tmp, **kw))
        _ttft(e, first)
        e.close()
        for _ in range(max(1, rounds)):
            e = engine_cls.open(EngineConfig(model, disk_cache=tmp, **kw))
            t, ev = _ttft(e, second)
            assert ev.stats is not None and ev.stats.cached_tokens > 0, "the restart was not served from disk"
            e.close()
            times.append(t)
            parts.append(_parts(ev))
    return statistics.median(times), parts

"""``python -m engine bench prefix``: TTFT with a long system prompt cold,
served from the prefix cache, and on a cache miss (the miss's overhead)."""
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
    n_ctx = max(4096, len(probe.backend.tokenize(system, special=False)) + 1024)
    probe.close()
    kw: dict[str, Any] = dict(n_ctx=n_ctx, n_threads=a.threads, backend=a.backend)
    on = Engine.open(EngineConfig(a.model, **kw))
    off = Engine.open(EngineConfig(a.model, cache_budget=0, **kw))
    users = ["Hi!", "Hello?", "Hey there.", "Good morning!", "Any news?", "Help me."]
    conv = lambda u: [Message("system", system), Message("user", u)]  # noqa: E731
    disabled, miss, warm = [], [], []
    for i in range(a.rounds):
        off.reset()
        disabled.append(_ttft(off, conv(users[i % len(users)]))[0])
        on.cache.clear()
        on.reset()
        miss.append(_ttft(on, conv(users[i % len(users)]))[0])
        on.reset()  # the live KV is gone; only the cached snapshot can serve
        t, ev = _ttft(on, conv(users[(i + 1) % len(users)]))
        assert ev.stats is not None and ev.stats.cached_tokens > 1000, ev.stats
        warm.append(t)
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
    restart = _after_restart(Engine, a.model, kw, conv(users[0]), conv(users[1]))
    cold, w = statistics.median(disabled), statistics.median(warm)
    prompt_tokens = len(on.prompt_tokens(conv(users[0])))
    result = {
        "backend": a.backend,
        "system_prompt_tokens": prompt_tokens,
        "cold_ttft_ms": round(cold, 2),
        "warm_ttft_ms": round(w, 2),
        "speedup": round(cold / w, 1),
        "miss_overhead_ratio": round(statistics.median(miss) / cold, 4),
        "restart_ttft_ms": round(restart, 2),
        "restart_speedup": round(cold / restart, 1),
        "turn3_prefill_tokens": ev3.stats.prefill_tokens,
        "turn3_new_message_and_template_tokens": new_tokens,
        "cache": on.cache_stats(),
        "rounds": a.rounds,
        "cold_all": [round(x, 1) for x in disabled],
        "miss_all": [round(x, 1) for x in miss],
        "warm_all": [round(x, 1) for x in warm],
    }
    on.close()
    off.close()
    return result


def _after_restart(engine_cls, model, kw: dict[str, Any], first: list[Message], second: list[Message]) -> float:
    """TTFT of a new question after a restart: one engine answers ``first`` with
    the disk store on and closes; a new engine on the same folder answers ``second``."""
    import tempfile

    from ..config import EngineConfig

    with tempfile.TemporaryDirectory(prefix="hearth-bench-disk-") as tmp:
        e = engine_cls.open(EngineConfig(model, disk_cache=tmp, **kw))
        _ttft(e, first)
        e.close()
        e = engine_cls.open(EngineConfig(model, disk_cache=tmp, **kw))
        t, ev = _ttft(e, second)
        assert ev.stats is not None and ev.stats.cached_tokens > 0, "the restart was not served from disk"
        e.close()
    return t

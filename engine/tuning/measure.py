"""Running the rows: load each variant, run the fixed prompt set, measure.

Every row answers the same prompts (one fixed system prompt, so the prefix
cache has something to serve) greedily to the same length, then reads the
quality text for perplexity. Times are medians over the prompts, after one
warm-up request that is not counted.
"""
from __future__ import annotations

import statistics
import threading
import time
from typing import Any, Callable, Sequence

from ..errors import Cancelled, HearthError
from ..prompt.messages import Message
from ..types import SamplingParams
from .quality import agreement, perplexity, quality_prompts, quality_text
from .rows import Variant

# The same for every row and every run, so two runs compare.
SYSTEM_PROMPT = (
    "You are Hearth, a friendly assistant that runs entirely on this computer. Answer the user's "
    "question directly and clearly. Prefer short paragraphs and plain words. When the user asks for "
    "code, give a small, complete example and explain it in one or two sentences. When you are not "
    "sure, say so rather than guessing. Never invent facts, names or numbers. Keep a calm, helpful tone "
    "and do not repeat the question back to the user.")
WARMUP = "Say hello."
MEMORY_KEYS = ("weights", "kv", "compute", "output")

Progress = Callable[[str], None]


def prompt_set(n: int) -> list[str]:
    """The first ``n`` prompts of engine/data/quality_prompts.json."""
    prompts = quality_prompts()
    if not 1 <= n <= len(prompts):
        raise HearthError(f"bench tune: --prompts must be from 1 to {len(prompts)}, got {n}")
    return prompts[:n]


def open_engine(path: str, base_load: dict[str, Any], v: Variant, model_ref: Any, threads: int):
    """An Engine on ``v``'s backend (the baseline's arguments with ``v.load`` on top)."""
    from ..backends.llama.backend import LlamaCppBackend
    from ..engine import Engine
    from ..kv.prefix_cache import DEFAULT_BUDGET

    be = LlamaCppBackend(path, **{**base_load, **v.load})
    eng = Engine(be, model=model_ref, cache_budget=DEFAULT_BUDGET if v.cache else 0)
    try:
        if v.draft != "none":
            eng.set_speculation(v.draft, n_threads=threads, force=True)  # measure the draft, not its off switch
    except BaseException:
        eng.close()
        raise
    return eng


def _reply(engine: Any, user: str, params: SamplingParams, cancel: threading.Event | None):
    engine.reset()  # the live KV is gone: only the prefix cache can serve the system prompt
    messages = [Message("system", SYSTEM_PROMPT), Message("user", user)]
    for ev in engine.stream(messages, params, cancel=cancel):
        if ev.kind == "final":
            if ev.finish_reason == "cancelled":
                raise Cancelled("the benchmark was stopped")
            return ev
    raise HearthError("the engine ended a reply without its final event")


def measure_row(engine: Any, prompts: Sequence[str], tokens: int, ppl_tokens: int,
                ref_tokens: list[list[int]] | None, cancel: threading.Event | None = None,
                ) -> tuple[dict[str, Any], list[list[int]]]:
    """One row's figures (TTFT, TPOT, tok/s, memory, agreement with ``ref_tokens``,
    the baseline's replies or None for the baseline itself, and perplexity) and its replies."""
    t0 = time.perf_counter()
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    _reply(engine, WARMUP, params, cancel)
    ttft, tpot, tok_s, cached, replies, accept = [], [], [], [], [], []
    for p in prompts:
        if cancel is not None and cancel.is_set():
            raise Cancelled("the benchmark was stopped")
        st = _reply(engine, p, params, cancel)
        s = st.stats
        ttft.append(s.ttft_ms)
        tpot.append(s.tpot_ms)
        tok_s.append(s.decode_tok_s)
        cached.append(s.cached_tokens)
        replies.append(list(st.token_ids))
        if s.spec and s.spec.get("drafted"):
            accept.append(s.spec["acceptance_rate"])
    ppl, _n = perplexity(engine.backend, quality_text(), max_tokens=ppl_tokens)
    engine.reset()  # perplexity emptied the KV behind the reuse tracker's back
    mem = engine.backend.memory_report()
    if engine.draft is not None:
        dmem = engine.draft.backend.memory_report()
        mem = {k: mem.get(k, 0) + dmem.get(k, 0) for k in MEMORY_KEYS}
    row: dict[str, Any] = {
        "ttft_ms": round(statistics.median(ttft), 2), "tpot_ms": round(statistics.median(tpot), 3),
        "tok_s": round(statistics.median(tok_s), 2), "cached_tokens": round(statistics.mean(cached), 1),
        "memory_bytes": int(sum(mem.get(k, 0) for k in MEMORY_KEYS)), "rss_bytes": _rss(),
        "perplexity": round(ppl, 4), "acceptance": round(statistics.mean(accept), 4) if accept else None,
        "exactness": engine.backend.describe().exactness,
    }
    row.update(agreement(ref_tokens if ref_tokens is not None else replies, replies, tokens))
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row, replies


def _rss() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:  # psutil missing on this platform: the backend's report still stands
        return 0

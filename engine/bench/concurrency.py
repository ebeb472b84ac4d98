"""``python -m engine bench serve``: the scheduler under concurrent load.

Rows, all measured in one run so the ratios compare like with like:
- aggregate decode tok/s at 1/2/4/8 concurrent API streams, against one stream
  and against llama.cpp's own batched decoding of the same batch shape
  (n sequences, one token each per step, through llama-cpp-python's
  low-level API, as llama-batched-bench does), for the bundled model and the
  bench target (Qwen2.5-Coder-1.5B) when it has been fetched;
- the window's TTFT and tok/s while 4 API streams run, against idle;
- P50/P99 TTFT and queue wait under a burst of 16 requests.
"""
from __future__ import annotations

import argparse
import time

import llama_cpp as lc
import numpy as np

from ..engine import Engine
from ..config import EngineConfig
from ..decode.metrics import percentile
from ..models import catalogue
from ..serve import Priority, Scheduler, ServeRequest, Ticket
from ..prompt.messages import Message
from ..types import SamplingParams

STREAMS = (1, 2, 4, 8)
TOPICS = ("a lighthouse", "a mountain village", "a river barge", "a desert market", "a night train",
          "an orchard", "a clock maker", "a fishing boat", "a library", "a glacier", "a bakery", "a comet",
          "a harbour", "a forest fire", "a violin", "a snowstorm")


def _req(i: int, tokens: int, priority: Priority = Priority.API) -> ServeRequest:
    msg = Message("user", f"Write a long story about {TOPICS[i % len(TOPICS)]}.")
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    return ServeRequest(messages=[msg], params=params, priority=priority)


def _span(t: Ticket) -> tuple[float, float]:
    """Absolute times of a finished request's first and last token."""
    first = t.submitted + t.times.queue_wait_s + t.times.prefill_s
    return first, first + t.times.decode_s


def hearth_decode(sched: Scheduler, n: int, tokens: int) -> float:
    """Aggregate decode tok/s of ``n`` concurrent streams through the scheduler."""
    tickets = [sched.submit(_req(i, tokens)) for i in range(n)]
    for t in tickets:
        for _ in t.events():
            pass
    spans = [_span(t) for t in tickets]
    decoded = sum(t.times.completion_tokens - 1 for t in tickets)
    return decoded / (max(b for _, b in spans) - min(a for a, _ in spans))


def native_decode(path: str, n: int, tokens: int, prompt: list[int], n_threads: int) -> float:
    """llama.cpp alone: ``n`` sequences share each llama_batch, one token each per step."""
    from ..backends.llama import init

    init()  # the same process set-up (log capture, GGML_CPU_TILED_MM) as Hearth's own loads
    mp = lc.llama_model_default_params()
    mp.use_extra_bufts = False  # the same kernels as Hearth's exact profile
    model = lc.llama_model_load_from_file(path.encode(), mp)
    cp = lc.llama_context_default_params()
    cp.n_ctx = n * (len(prompt) + tokens + 16)
    cp.n_batch = max(512, n * len(prompt))
    cp.n_ubatch = 512
    cp.n_seq_max = n
    cp.kv_unified = False
    cp.n_threads = cp.n_threads_batch = n_threads
    cp.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.no_perf = True
    ctx = lc.llama_init_from_model(model, cp)
    batch = lc.llama_batch_init(cp.n_batch, 0, 1)
    try:
        def fill(rows: list[tuple[int, list[int], int]]) -> list[int]:
            k, outs = 0, []
            for seq, toks, pos in rows:
                for j, tok in enumerate(toks):
                    batch.token[k], batch.pos[k], batch.n_seq_id[k] = tok, pos + j, 1
                    batch.seq_id[k][0] = seq
                    batch.logits[k] = j == len(toks) - 1
                    k += 1
                outs.append(k - 1)
            batch.n_tokens = k
            assert lc.llama_decode(ctx, batch) == 0
            return outs

        outs = fill([(s, prompt, 0) for s in range(n)])
        n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
        t0 = time.perf_counter()
        for step in range(tokens - 1):
            # Read each sequence's logits as a sampler would, then feed one token each.
            nxt = []
            for i in outs:
                row = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i), shape=(n_vocab,))
                nxt.append(int(np.argmax(row)))
            outs = fill([(s, [nxt[s]], len(prompt) + step) for s in range(n)])
        return n * (tokens - 1) / (time.perf_counter() - t0)
    finally:
        lc.llama_batch_free(batch)
        lc.llama_free(ctx)
        lc.llama_model_free(model)


def throughput_rows(path: str, tokens: int, rounds: int, n_threads: int | None) -> dict:
    """Aggregate decode throughput vs streams, Hearth beside native, best of ``rounds``."""
    engine = Engine.open(EngineConfig(path, n_ctx=512, n_threads=n_threads))
    info = engine.backend.describe()
    prompt = engine.prompt_tokens(_req(0, tokens).messages or [])
    sched = Scheduler(engine, parallel=max(STREAMS), queue_limit=16)
    rows = []
    try:
        hearth_decode(sched, 2, 8)  # warm-up: first-use costs (buffers, page faults) stay out of the rows
        for n in STREAMS:
            ours = max(hearth_decode(sched, n, tokens) for _ in range(rounds))
            ref = max(native_decode(path, n, tokens, prompt, info.threads or 1) for _ in range(rounds))
            rows.append({"streams": n, "hearth_tok_s": round(ours, 1), "llama_cpp_tok_s": round(ref, 1),
                         "hearth_vs_llama_cpp": round(ours / ref, 3)})
    finally:
        sched.close()
        engine.close()
    one, one_ref = rows[0]["hearth_tok_s"], rows[0]["llama_cpp_tok_s"]
    for r in rows:
        r["hearth_vs_1_stream"] = round(r["hearth_tok_s"] / one, 3)
        r["llama_cpp_vs_1_stream"] = round(r["llama_cpp_tok_s"] / one_ref, 3)
    return {"model": info.name, "quant": info.quant, "threads": info.threads, "rows": rows}


def window_rows(path: str, tokens: int, n_threads: int | None) -> dict:
    """The window's TTFT and tok/s while 4 API streams decode, against idle."""
    engine = Engine.open(EngineConfig(path, n_ctx=1024, n_threads=n_threads))
    sched = Scheduler(engine, parallel=4, queue_limit=16)
    try:
        def window() -> dict:
            t = sched.submit(_req(99, tokens, Priority.WINDOW))
            final = list(t.events())[-1]
            assert final.stats is not None
            return {"ttft_ms": final.stats.ttft_ms, "tok_s": final.stats.decode_tok_s}

        window()  # warm-up: the engine's first reply pays one-off costs
        idle = window()
        api = [sched.submit(_req(i, 100_000)) for i in range(4)]
        streams = [t.events() for t in api]
        for s in streams:
            next(s)  # every API stream is decoding
        busy = window()
        for t in api:
            t.cancel()
        for s in streams:
            for _ in s:
                pass
    finally:
        sched.close()
        engine.close()
    return {"idle": idle, "with_4_api_streams": busy,
            "ttft_ratio": round(busy["ttft_ms"] / idle["ttft_ms"], 3),
            "tok_s_ratio": round(idle["tok_s"] / busy["tok_s"], 3) if busy["tok_s"] else None,
            "target": "both ratios <= 1.3"}


def burst_rows(path: str, tokens: int, n_threads: int | None, n: int = 16) -> dict:
    """P50/P99 TTFT and queue wait of ``n`` requests submitted at once."""
    engine = Engine.open(EngineConfig(path, n_ctx=512, n_threads=n_threads))
    sched = Scheduler(engine, parallel=4, queue_limit=n)
    try:
        tickets = [sched.submit(_req(i, tokens)) for i in range(n)]
        ttft, wait = [], []
        for t in tickets:
            final = list(t.events())[-1]
            assert final.stats is not None
            ttft.append(final.stats.ttft_ms)
            wait.append(t.times.queue_wait_s * 1e3)
    finally:
        sched.close()
        engine.close()
    return {"requests": n, "parallel": 4, "ttft_ms_p50": round(percentile(ttft, 50), 1),
            "ttft_ms_p99": round(percentile(ttft, 99), 1), "queue_wait_ms_p50": round(percentile(wait, 50), 1),
            "queue_wait_ms_p99": round(percentile(wait, 99), 1)}


def bench_serve(a: argparse.Namespace) -> dict:
    tokens = max(8, a.tokens)
    rounds = max(1, min(a.rounds, 3))
    bundled = str(a.model or catalogue.bundled_model_path())
    out: dict = {"tokens": tokens, "throughput": [throughput_rows(bundled, tokens, rounds, a.threads)]}
    target = catalogue.bench_model_path(catalogue.BENCH_TARGET)
    if a.model is None and target is not None:
        out["throughput"].append(throughput_rows(str(target), tokens, rounds, a.threads))
    elif a.model is None:
        out["throughput_skipped"] = (f"{catalogue.BENCH_TARGET.filename} is not fetched; "
                                     "run `python -m engine models fetch-bench-pair` for its row")
    out["window"] = window_rows(bundled, tokens, a.threads)
    out["burst"] = burst_rows(bundled, tokens, a.threads)
    return out

"""``python -m engine bench overhead``: Hearth's streaming loop against
llama-cpp-python's own generate on the same model, plus the roofline, and
what recording each reply's timeline costs (the same loop with it off)."""
from __future__ import annotations

import argparse
import statistics
import time


from ..sizing.bandwidth import measure_read_bandwidth
from ..prompt.messages import Message
from ..types import SamplingParams

BENCH_PROMPT = [Message("user", "Write a long, detailed story about a lighthouse keeper who finds a "
                                "message in a bottle. Describe the sea, the weather and the town.")]


def bench_overhead(a: argparse.Namespace) -> dict:
    """Hearth's streaming loop vs llama-cpp-python's own Llama.generate, greedy."""
    from llama_cpp import Llama

    from ..backends.llama.backend import default_threads
    from ..engine import Engine
    from ..config import EngineConfig
    from ..models.catalogue import resolve

    n_tok = a.tokens
    threads = a.threads or default_threads()
    path = resolve(a.model).path
    n_ctx = 1024 + n_tok
    engine = Engine.open(EngineConfig(path, n_ctx=n_ctx, n_threads=threads))
    ref = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                n_batch=512, verbose=False)
    prompt = engine.prompt_tokens(BENCH_PROMPT)
    params = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=n_tok,
                            ignore_eos=True)

    def run_reference() -> float:
        ref.reset()
        n = 0
        t_first = t_last = 0.0
        for _tok in ref.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
            n += 1
            t_last = time.perf_counter()
            if n == 1:
                t_first = t_last
            if n == n_tok:
                break
        return (n - 1) / (t_last - t_first)

    def run_hearth(record: bool = True) -> float:
        engine.reset()
        engine.record_timeline = record
        for ev in engine.stream(BENCH_PROMPT, params):
            if ev.kind == "final":
                assert ev.stats is not None and ev.stats.generated_tokens == n_tok, ev.stats
                return ev.stats.decode_tok_s
        raise RuntimeError("no final event")

    def run_untimed() -> float:
        return run_hearth(record=False)

    run_reference(), run_hearth()  # warm-up: page in weights, build caches
    hearth: list[float] = []
    reference: list[float] = []
    untimed: list[float] = []
    for i in range(a.rounds):
        # Alternate which side goes first so drift on the machine hits both.
        order = (run_hearth, run_untimed, run_reference) if i % 2 == 0 else (run_reference, run_untimed, run_hearth)
        for fn in order:
            {run_hearth: hearth, run_untimed: untimed, run_reference: reference}[fn].append(fn())
    bw = measure_read_bandwidth(threads)
    h_med, r_med = statistics.median(hearth), statistics.median(reference)
    model_bytes = engine.backend.describe().weight_bytes
    engine.close()
    return {
        "ratio": round(statistics.median(h / r for h, r in zip(hearth, reference)), 4),
        # Decode tok/s with the timeline recorded / without: 0.99 or more means under 1%.
        "timeline_ratio": round(statistics.median(h / u for h, u in zip(hearth, untimed)), 4),
        "untimed_tok_s": round(statistics.median(untimed), 2),
        "decode_tok_s": round(h_med, 2),
        "reference_tok_s": round(r_med, 2),
        "roofline_fraction": round(model_bytes * h_med / bw, 4),
        "mem_bandwidth_gb_s": round(bw / 1e9, 2),
        "model_bytes": model_bytes,
        "tokens": n_tok,
        "rounds": a.rounds,
        "threads": threads,
        "hearth_tok_s_all": [round(x, 2) for x in hearth],
        "reference_tok_s_all": [round(x, 2) for x in reference],
        "untimed_tok_s_all": [round(x, 2) for x in untimed],
    }

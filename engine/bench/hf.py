"""``python -m engine bench hf``: Hearth's loop on the transformers backend vs
transformers' own ``model.generate()``, same model object, greedy, one process.

Both sides are timed the same way: a timestamp per generated token, and the
speed is 1 / the median gap between tokens, so prefill is excluded and a
step that lost the CPU to another process does not skew the number (this
runs on shared machines). Throughput over the whole reply is reported too.
Rounds alternate which side goes first, so drift hits both.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from .overhead import BENCH_PROMPT
from ..types import Compute, SamplingParams


class _TimingStreamer:
    """A ``generate()`` streamer that only timestamps each new token."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.tokens: list[int] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        now = time.perf_counter()
        if not self._prompt_seen:  # generate() first hands over the prompt itself
            self._prompt_seen = True
            return
        self.times.append(now)
        self.tokens.extend(int(t) for t in value.reshape(-1).tolist())

    def end(self) -> None:
        pass


def _speeds(times: list[float]) -> tuple[float, float]:
    """(1 / median token gap, tokens per second from the first token to the last)."""
    gaps = [b - a for a, b in zip(times, times[1:])]
    return 1.0 / statistics.median(gaps), len(gaps) / (times[-1] - times[0])


def _threads(a: argparse.Namespace) -> int:
    if a.threads:
        return a.threads
    import os

    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def _reference(b, prompt: list[int], n_tok: int, last: dict[str, list[int]]) -> Callable[[], tuple[float, float]]:
    """transformers' own ``generate`` on the same model: greedy, exactly ``n_tok`` tokens."""
    import torch
    from transformers import GenerationConfig

    # A neutral config: no EOS (so both sides make exactly n_tok tokens), no
    # sampling, and none of the model's default processors.
    gen_cfg = GenerationConfig(do_sample=False, max_new_tokens=n_tok, eos_token_id=None,
                               pad_token_id=b.tok.pad_token_id if b.tok.pad_token_id is not None else 0,
                               use_cache=True)
    input_ids = torch.tensor([prompt], device=b.input_device)
    mask = torch.ones_like(input_ids)

    def run() -> tuple[float, float]:
        s = _TimingStreamer()
        with torch.inference_mode():
            b.model.generate(input_ids, attention_mask=mask, generation_config=gen_cfg, streamer=s)
        assert len(s.times) == n_tok, len(s.times)
        last["generate"] = s.tokens
        return _speeds(s.times)
    return run


def _hearth(engine, prompt: list[int], params: SamplingParams, n_tok: int,
            last: dict[str, list[int]]) -> Callable[[], tuple[float, float]]:
    """Engine._run without the prefix cache: the shared loop, detokenizer and stop rules
    exactly as a chat reply runs them; only a timestamp is added."""
    from ..decode.generate import drive, generate_step
    from ..decode.metrics import GenerationStats
    from ..decode.sampling import make_sampler
    from ..decode.stream import stream_tokens

    b = engine.backend

    def run() -> tuple[float, float]:
        engine.reset()
        times: list[float] = []

        def timed(steps):  # each token's arrival; the step generator's Computes pass through
            item = next(steps)
            while True:
                if isinstance(item, Compute):
                    item = steps.send((yield item))
                    continue
                times.append(time.perf_counter())
                yield item
                item = next(steps)

        history = list(prompt)
        steps = timed(generate_step(prompt, make_sampler(params), history))
        stats = GenerationStats(backend=b.name)
        for ev in drive(b, stream_tokens(b, steps, prompt_len=len(prompt), cached=0, params=params,
                                         stats=stats, t_start=time.perf_counter())):
            if ev.kind == "final":
                assert ev.stats is not None and ev.stats.generated_tokens == n_tok, ev.stats
                last["hearth"] = list(ev.token_ids)
        return _speeds(times)
    return run


def bench_hf(a: argparse.Namespace) -> dict:
    from ..backends.hf import HFBackend
    from ..config import EngineConfig
    from ..engine import Engine

    n_tok = a.tokens
    threads = _threads(a)
    quant = (a.quant or ["none"])[0]
    engine = Engine.open(EngineConfig(a.model, backend="hf", quant=quant, n_ctx=1024 + n_tok, n_threads=threads,
                         cache_budget=0))
    b = engine.backend
    assert isinstance(b, HFBackend)  # what backend="hf" loads; its model and tokenizer are compared below
    prompt = engine.prompt_tokens(BENCH_PROMPT)
    params = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=n_tok,
                            ignore_eos=True)
    last_tokens: dict[str, list[int]] = {}
    run_reference = _reference(b, prompt, n_tok, last_tokens)
    run_hearth = _hearth(engine, prompt, params, n_tok, last_tokens)
    run_reference(), run_hearth()  # warm-up: page in weights, first-call costs
    runs: dict[str, list[tuple[float, float]]] = {"hearth": [], "generate": []}
    for i in range(a.rounds):
        order = (run_hearth, run_reference) if i % 2 == 0 else (run_reference, run_hearth)
        for fn in order:
            runs["hearth" if fn is run_hearth else "generate"].append(fn())
    tput_h, tput_g = [x[1] for x in runs["hearth"]], [x[1] for x in runs["generate"]]
    hearth, reference = [x[0] for x in runs["hearth"]], [x[0] for x in runs["generate"]]
    h, g = last_tokens["hearth"], last_tokens["generate"]
    same_prefix = next((i for i, (x, y) in enumerate(zip(h, g)) if x != y), min(len(h), len(g)))
    mem = b.memory_report()
    result = {
        "ratio": round(statistics.median(x / y for x, y in zip(hearth, reference)), 4),
        "decode_tok_s": round(statistics.median(hearth), 2),
        "generate_tok_s": round(statistics.median(reference), 2),
        "throughput_ratio": round(statistics.median(x / y for x, y in zip(tput_h, tput_g)), 4),
        "same_tokens_prefix": same_prefix,
        "model": engine.model.label if engine.model else str(a.model),
        "quant": quant,
        "device": str(b.input_device),
        "dtype": str(b.kv_dtype).replace("torch.", ""),
        "weight_bytes": mem.get("weights", 0),
        "prompt_tokens": len(prompt),
        "tokens": n_tok,
        "rounds": a.rounds,
        "threads": threads,
        "hearth_tok_s_all": [round(x, 2) for x in hearth],
        "generate_tok_s_all": [round(x, 2) for x in reference],
    }
    engine.close()
    return result

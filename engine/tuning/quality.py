"""What a quantization costs in output quality: perplexity on a fixed text and greedy
agreement with a reference, on any Backend. The tuning bench's quality column and
``bench quality`` (engine/bench/quality.py) both measure with these."""
from __future__ import annotations

import json
import math
import statistics
from importlib.resources import files
from typing import Any, Sequence

import numpy as np

from ..prompt.messages import Message
from ..types import SamplingParams

GEN_TOKENS = 64
PAD = -1


def quality_text() -> str:
    return files("engine").joinpath("data/quality_text.txt").read_text(encoding="utf-8")


def quality_prompts() -> list[str]:
    return json.loads(files("engine").joinpath("data/quality_prompts.json").read_text(encoding="utf-8"))


def text_logits(backend: Any, text: str, *, max_tokens: int | None = None) -> tuple[list[int], np.ndarray]:
    """``text``'s token ids and the logits the backend gives after each, in one pass over its
    own KV cache (left empty afterwards)."""
    ids = backend.tokenize(text, add_bos=backend.add_bos, special=False)
    limit = min(backend.n_ctx, max_tokens or backend.n_ctx)
    ids = ids[:limit]
    backend.truncate(0)
    try:
        logits = backend.forward(ids, all_logits=True)
    finally:
        backend.truncate(0)
    return ids, logits


def _log_softmax(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float64)
    top = rows.max(axis=1, keepdims=True)
    return rows - (np.log(np.exp(rows - top).sum(axis=1, keepdims=True)) + top)


def perplexity_of(ids: Sequence[int], logits: np.ndarray) -> float:
    """exp(mean negative log-likelihood) of ``ids[1:]``, each predicted by the row before it."""
    targets = np.asarray(ids[1:])
    nll = 0.0
    for s in range(0, len(targets), 128):  # float64 rows, a slice at a time
        lp = _log_softmax(logits[s:min(s + 128, len(targets))])
        nll -= float(lp[np.arange(len(lp)), targets[s:s + 128]].sum())
    return math.exp(nll / len(targets))


def perplexity(backend: Any, text: str, *, max_tokens: int | None = None) -> tuple[float, int]:
    """exp(mean negative log-likelihood) of ``text``'s tokens, each predicted from
    the ones before it, in one pass over the backend's own KV cache.

    Returns (perplexity, number of predicted tokens).
    """
    ids, logits = text_logits(backend, text, max_tokens=max_tokens)
    return perplexity_of(ids, logits), len(ids) - 1


def kl_divergence(ref: np.ndarray, got: np.ndarray) -> dict:
    """KL(ref || got) of the next-token distributions, row by row (nats): the mean, the 99th
    percentile and the largest, and how often the two rows' top token differs."""
    if ref.shape != got.shape:
        raise ValueError(f"logits of different shapes: {ref.shape} and {got.shape}")
    kls, flips = [], 0
    for s in range(0, len(ref), 128):
        p, q = _log_softmax(ref[s:s + 128]), _log_softmax(got[s:s + 128])
        kls.extend(np.maximum((np.exp(p) * (p - q)).sum(axis=1), 0.0).tolist())
        flips += int((p.argmax(axis=1) != q.argmax(axis=1)).sum())
    k = np.asarray(kls)
    return {"kl_mean": float(k.mean()), "kl_p99": float(np.percentile(k, 99)), "kl_max": float(k.max()),
            "top1_changed": round(flips / len(k), 4), "positions": len(k)}


def greedy_replies(engine: Any, prompts: Sequence[str], n: int = GEN_TOKENS) -> tuple[list[list[int]], float]:
    """Greedy token ids of each reply (ending at EOS or after ``n``) and the median decode tok/s."""
    params = SamplingParams(temperature=0.0, max_tokens=n)
    out, speeds = [], []
    for p in prompts:
        engine.reset()
        for ev in engine.stream([Message("user", p)], params):
            if ev.kind == "final":
                out.append(list(ev.token_ids))
                if ev.stats.decode_tok_s:
                    speeds.append(ev.stats.decode_tok_s)
    engine.reset()
    return out, statistics.median(speeds) if speeds else 0.0


def agreement(ref: Sequence[Sequence[int]], got: Sequence[Sequence[int]], n: int = GEN_TOKENS) -> dict:
    """Position-wise identical fraction over the first ``n`` tokens, and the identical prefix.

    A reply that ended (EOS) is padded, so two replies that both stop at the
    same place agree on every remaining position.
    """
    same, prefixes = [], []
    for a, b in zip(ref, got, strict=True):
        a = (list(a) + [PAD] * n)[:n]
        b = (list(b) + [PAD] * n)[:n]
        same.append(sum(x == y for x, y in zip(a, b)) / n)
        prefixes.append(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), n))
    return {"agreement": round(statistics.mean(same), 4),
            "prefix_tokens": round(statistics.mean(prefixes), 2),
            "min_prefix_tokens": min(prefixes)}

"""``bench long-chat``'s measurements inside the engine core: the conversation's KV kept and put back
between policies, and shift's drift against reading the same view from scratch.

Drift, at turns after a shift (their KV was moved into place, then the turn read only its own
new tokens): the reply's tokens are read again behind the moved KV and behind the same prompt
read from scratch (in the core's chunks, as a drop would), and the two next-token distributions
compared over the reply (KL, top-1 changes: tuning/quality.py, as ``bench quality`` does); the
greedy reply written from scratch is compared with the shifted one (agreement, identical prefix).
Everything runs on the core's thread between turns, and the sequence is put back as it was.
"""
from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from ..kv.reuse import PREFILL_CHUNK
from ..tuning.quality import agreement, kl_divergence
from ..types import WANT_ALL, WANT_LAST, WANT_NONE


def save_kv(engine: Any) -> tuple:
    """What the window's sequence holds now, with the prompt builder's cut (core's thread)."""
    kv = engine.kv
    return kv.pool.seq_snapshot(0), kv.kv_tokens(0), kv.table.shifted[0], engine.prompts._cut


def restore_kv(engine: Any, saved: tuple) -> None:
    """Put ``save_kv``'s state back (core's thread)."""
    snap, tokens, mark, cut = saved
    kv = engine.kv
    kv.pool.seq_restore(0, snap)
    kv.table.kv[0], kv.table.shifted[0] = list(tokens), mark
    engine.prompts._cut = cut


def drift_at(engine: Any, prompt: list[int], reply: list[int]) -> dict:
    """Drift at one turn (core's thread): ``prompt`` is what the reply read behind the moved KV."""
    pool = engine.kv.pool
    saved = save_kv(engine)
    n = len(prompt)
    feed = [prompt[-1], *reply[:-1]]
    try:
        pool.seq_truncate(0, n - 1)
        shifted = np.array(pool.batch([(0, feed, WANT_ALL)])[0], copy=True)
        pool.seq_truncate(0, 0)
        for s in range(0, n - 1, PREFILL_CHUNK):
            pool.batch([(0, prompt[s:min(s + PREFILL_CHUNK, n - 1)], WANT_NONE)])
        mark = pool.seq_len(0)
        fresh = np.array(pool.batch([(0, feed, WANT_ALL)])[0], copy=True)
        pool.seq_truncate(0, mark)
        again: list[int] = []
        logits = pool.batch([(0, [prompt[-1]], WANT_LAST)])[0]
        while len(again) < len(reply):
            again.append(int(np.argmax(logits)))
            logits = pool.batch([(0, [again[-1]], WANT_LAST)])[0]
    finally:
        restore_kv(engine, saved)
    out = kl_divergence(fresh, shifted)
    out.update(agreement([again], [reply], len(reply)))
    return out


class DriftProbe:
    """Measures drift after up to ``limit`` shift events of a run (the first turn after each)."""

    def __init__(self, engine: Any, limit: int) -> None:
        self.engine, self.limit = engine, limit
        self.armed = False
        self.rows: list[dict] = []

    def __call__(self, rec: dict, prompt: list[int]) -> None:
        if rec["shifted_tokens"]:
            self.armed = True
            return
        if not self.armed or len(self.rows) >= self.limit or rec["read_tokens"] > 2 * len(rec["reply_tokens"]) + 64:
            return
        self.armed = False
        got = self.engine.core.call(lambda: drift_at(self.engine, prompt, rec["reply_tokens"]))
        got = {k: round(v, 4) if isinstance(v, float) else v for k, v in got.items()}
        self.rows.append({"turn": rec["turn"], **got})

    def summary(self) -> dict:
        rows = self.rows
        if not rows:
            return {"measured": 0}
        return {"measured": len(rows), "agreement": round(statistics.mean(r["agreement"] for r in rows), 4),
                "prefix_tokens": round(statistics.mean(r["prefix_tokens"] for r in rows), 1),
                "kl_mean": round(statistics.mean(r["kl_mean"] for r in rows), 5),
                "kl_p99": round(max(r["kl_p99"] for r in rows), 5), "kl_max": round(max(r["kl_max"] for r in rows), 5),
                "top1_changed": round(statistics.mean(r["top1_changed"] for r in rows), 4), "turns": rows}

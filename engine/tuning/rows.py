"""The rows of "Benchmark this model": a baseline and one change at a time.

Each :class:`Variant` is the baseline with exactly one thing changed (a
quantized KV cache also needs flash attention on the CPU: that row says so).
A row that cannot run on this machine (no GPU, no compatible draft model, one
CPU thread) is still listed, with the reason, so the table shows every row.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

BASELINE = "baseline"
BASELINE_AGAIN = "baseline (again)"


@dataclass(frozen=True, slots=True)
class Variant:
    """One row: what differs from the baseline and how to load it."""

    name: str
    change: str                                   # in words, for the table
    load: dict[str, Any] = field(default_factory=dict)  # LlamaCppBackend arguments that differ
    cache: bool = True                            # the prefix cache (snapshots) on
    draft: str = "none"                           # "none", "ngram" or a draft GGUF path
    # The window's settings this row stands for ("Apply best"); None: no setting carries it.
    settings: dict[str, Any] | None = None
    absent: str | None = None                     # why the row is not measured here

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "change": self.change, "settings": self.settings, "absent": self.absent}


def baseline_load(n_ctx: int, threads: int) -> dict[str, Any]:
    """The baseline's backend arguments: everything on the CPU, f16 KV, exact kernels."""
    return {"n_ctx": n_ctx, "n_threads": threads, "n_gpu_layers": 0, "kv_type": "f16",
            "flash_attn": False, "repack": False, "exactness": "exact"}


def variants(threads: int, *, gpus: Sequence[str], draft_path: str | None,
             logical_cpus: int | None = None) -> list[Variant]:
    """Every row, in order, ending with the baseline again (its spread is the noise).

    ``threads``: the baseline's thread count; ``gpus``: names of devices layers
    can go to; ``draft_path``: a compatible draft GGUF, or None."""
    base = {"draft": "none", "kv_type": "f16", "n_threads": threads, "exactness": "exact"}
    rows = [Variant(BASELINE, "prefix cache on, no draft, KV f16, CPU only, exact kernels", settings=base),
            Variant("prefix cache off", "no KV snapshots kept between conversations", cache=False),
            Variant("draft n-gram", "speculative decoding with n-gram lookup in the conversation",
                    draft="ngram", settings={**base, "draft": "auto"})]
    if draft_path:
        rows.append(Variant("draft model", f"speculative decoding with {os.path.basename(draft_path)}",
                            draft=draft_path, settings={**base, "draft": "auto"}))
    else:
        rows.append(Variant("draft model", "speculative decoding with a smaller model",
                            absent="no compatible draft model among the local models"))
    for kv in ("q8_0", "q4_0"):
        rows.append(Variant(f"KV {kv}", f"KV cache in {kv} (a quantized V cache needs flash attention)",
                            load={"kv_type": kv, "flash_attn": True}, settings={**base, "kv_type": kv}))
    others = sorted({max(1, threads // 2), logical_cpus or os.cpu_count() or threads} - {threads})
    for n in others:
        rows.append(Variant(f"threads {n}", f"{n} CPU threads instead of {threads}", load={"n_threads": n},
                            settings={**base, "n_threads": n}))
    if not others:
        rows.append(Variant("threads", "another thread count", absent="this machine has one CPU thread"))
    if gpus:
        rows.append(Variant("GPU layers all", f"every layer on {gpus[0]}",
                            load={"n_gpu_layers": -1, "flash_attn": None},
                            settings={**base, "gpu_layers": "all"}))
    else:
        rows.append(Variant("GPU layers all", "every layer on the GPU",
                            absent="no GPU this llama.cpp build can use; everything runs on the CPU"))
    rows.append(Variant("flash attention", "flash attention on (exactness: batched logits may differ)",
                        load={"flash_attn": True}))
    rows.append(Variant("fast kernels", "exactness fast: repack buffers and flash attention",
                        load={"exactness": "fast", "flash_attn": None}, settings={**base, "exactness": "fast"}))
    rows.append(replace(rows[0], name=BASELINE_AGAIN, change="the baseline, measured again: the noise"))
    return rows


def select(rows: list[Variant], only: Sequence[str] | None) -> list[Variant]:
    """The rows named in ``only`` (the baseline and its repeat always stay)."""
    if not only:
        return rows
    known = {r.name for r in rows}
    unknown = [n for n in only if n not in known]
    if unknown:
        from ..errors import HearthError

        raise HearthError(f"bench tune: no row called {unknown[0]!r}; rows: {', '.join(sorted(known))}")
    keep = set(only) | {BASELINE, BASELINE_AGAIN}
    return [r for r in rows if r.name in keep]

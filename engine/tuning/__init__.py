"""Tune one variable at a time (issue 16, "Benchmark this model"), Qt-free.

``run_tune`` measures a baseline, then each change on its own against it in
the same run, then the baseline again (the noise). ``python -m engine bench
tune`` and the window's dialog both call it; ``report`` judges, saves,
exports and compares runs.

This package is public: the app's "Benchmark this model" dialog uses ``run_tune`` and ``report``, and the
exactness check ``profile_difference`` (docs/layout.md, "The engine's face").
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Sequence

from ..errors import Cancelled, HearthError
from . import report
from .measure import SYSTEM_PROMPT, measure_row, open_engine, prompt_set
from .report import profile_difference
from .rows import BASELINE, Variant, baseline_load, select, variants

__all__ = ["BASELINE", "SYSTEM_PROMPT", "Variant", "profile_difference", "report", "run_tune"]

# progress(rows done, rows in all, the row starting now or "" at the end)
Progress = Callable[[int, int, str], None]


def run_tune(model: str | os.PathLike[str] | None = None, *, prompts: int = 4, tokens: int = 64,
             ppl_tokens: int = 512, threads: int | None = None, n_ctx: int = 2048,
             only: Sequence[str] | None = None, progress: Progress | None = None,
             cancel: threading.Event | None = None) -> dict[str, Any]:
    """Every row for a GGUF ``model`` (default: the bundled one), as one JSON-able dict.

    ``prompts``: how many of the fixed prompts; ``tokens``: greedy tokens per
    reply (EOS ignored, so every row decodes the same count); ``ppl_tokens``:
    tokens of engine/data/quality_text.txt for perplexity; ``only``: row names
    to keep (the baseline and its repeat always run). ``cancel`` stops between
    tokens and raises Cancelled."""
    from ..backends.llama import devices, init
    from ..backends.llama.backend import default_threads
    from ..sizing.drafts import find_draft_for
    from ..models.catalogue import resolve
    from ..models.gguf import model_info

    ref = resolve(model)
    if ref.kind == "hub":
        from ..models.hub import fetch_ref

        ref = fetch_ref(ref)
    if ref.kind != "gguf":
        raise HearthError("bench tune measures GGUF models on llama.cpp; this is a transformers model")
    if tokens < 2:
        raise HearthError(f"bench tune: --tokens must be at least 2 (TPOT needs two tokens), got {tokens}")
    texts = prompt_set(prompts)
    path = str(ref.path)
    threads = threads or default_threads()
    draft = find_draft_for(model_info(path).vocab())
    init()
    gpus = [d.name for d in devices.gpu_devices()]
    rows = select(variants(threads, gpus=gpus, draft_path=str(draft) if draft else None), only)
    base_load = baseline_load(n_ctx, threads)
    out: list[dict[str, Any]] = []
    ref_tokens: list[list[int]] | None = None
    t0 = time.perf_counter()
    for i, v in enumerate(rows):
        if cancel is not None and cancel.is_set():
            raise Cancelled("the benchmark was stopped")
        if progress is not None:
            progress(i, len(rows), v.name)
        row: dict[str, Any] = {**v.to_dict(), "status": "absent" if v.absent else "measured", "worse": []}
        if v.absent is None:
            eng = open_engine(path, base_load, v, ref, threads)
            try:
                figures, replies = measure_row(eng, texts, tokens, ppl_tokens, ref_tokens, cancel)
            finally:
                eng.close()
            row.update(figures)
            if v.name == BASELINE:
                ref_tokens = replies
        out.append(row)
    if progress is not None:
        progress(len(rows), len(rows), "")
    spread = report.judge(out)
    return {"kind": "tune", "model": ref.label, "path": path, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "params": {"prompts": prompts, "tokens": tokens, "ppl_tokens": ppl_tokens, "threads": threads,
                       "n_ctx": n_ctx},
            "devices": gpus or ["CPU"], "noise": spread, "min_noise": report.MIN_NOISE,
            "best": report.best(out, tokens), "rows": out, "seconds": round(time.perf_counter() - t0, 1)}

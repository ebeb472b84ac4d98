"""``python -m engine bench sizing``: predicted memory against llama.cpp's own buffers.

Loads the bundled model and the Qwen2.5-Coder benchmark pair (those present;
absent ones are listed under ``skipped``) at n_ctx 2k, 8k and 32k, each
clamped to the model's training context, in both exactness profiles (the fast
one with flash attention and the repack buffers, the exact one without; or the
one ``--exactness`` names), and compares the planner's weights, KV and compute
figures with what llama.cpp reports it allocated. ``max_rel_error`` is the
worst relative error over every part of every case; the target is 0.10.
``--gpu-check`` repeats the cases fully offloaded when ggml reports a GPU
device (the window's view of the machine, Vulkan-only GPUs included).

``pool`` (sizing_pool.py): the window plus ``--parallel`` API sequences (default 4; 0 skips it) at
8k (or ``--ctx``), in one context of a stream per sequence as the engine core opens it, against
today's two contexts (the window's and the server's batch context), measured and planned; the
pool's plan against its allocation has a target of 0.05.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ..config import EXACTNESS, default_exactness
from ..sizing.hardware import Hardware, format_size
from ..sizing.memory import Config, estimate
from ..sizing.reality import compare_to_report
from ..sizing.shape import spec_from_gguf
from .sizing_pool import POOL_TARGET, measure_pool

CONTEXTS = (2048, 8192, 32768)
POOL_CONTEXT = 8192
TARGET = 0.10


def bench_models() -> tuple[list[tuple[str, Path]], list[dict[str, str]]]:
    """(label, path) of the models to measure, and the ones skipped with why."""
    from ..models.catalogue import BENCH_DRAFT, BENCH_TARGET, bench_model_path, bundled_model_path

    found: list[tuple[str, Path]] = [("bundled", bundled_model_path())]
    skipped = []
    for m in (BENCH_DRAFT, BENCH_TARGET):
        p = bench_model_path(m)
        if p is None:
            skipped.append({"model": m.filename, "why": "not downloaded (python -m engine models fetch-bench-pair)"})
        else:
            found.append((m.filename, p))
    return found, skipped


def measure(path: Path, n_ctx: int, *, n_batch: int = 512, n_gpu_layers: int = 0, kv_type: str = "f16",
            n_threads: int | None = None, hardware: Hardware | None = None,
            exactness: str | None = None) -> dict[str, Any]:
    """Load ``path`` with these settings in the ``exactness`` profile (None: the default one),
    read llama.cpp's buffers, and compare."""
    from ..backends.llama.backend import LlamaCppBackend

    exactness = exactness or default_exactness()
    spec = spec_from_gguf(path)
    hw = hardware or Hardware((), 1 << 50, 1 << 50, 1)
    cfg = Config(spec, n_ctx, n_gpu_layers, kv_type, n_batch, exactness=exactness)
    t0 = time.perf_counter()
    b = LlamaCppBackend(path, n_ctx=n_ctx, n_batch=n_batch, n_gpu_layers=n_gpu_layers, kv_type=kv_type,
                        n_threads=n_threads, exactness=exactness)
    try:
        report = b.memory_report()
    finally:
        b.close()
    result = compare_to_report(estimate(cfg, hw), report)
    result.update(n_ctx=n_ctx, n_batch=n_batch, n_gpu_layers=n_gpu_layers, kv_type=kv_type, profile=exactness,
                  flash_attn=cfg.flash_attn, load_s=round(time.perf_counter() - t0, 2))
    return result


def bench_sizing(a: argparse.Namespace) -> dict[str, Any]:
    models, skipped = bench_models()
    if a.model:
        models = [(Path(a.model).name, Path(a.model))]
        skipped = []
    contexts = (a.ctx,) if a.ctx else CONTEXTS
    profiles = (a.exactness,) if getattr(a, "exactness", None) else EXACTNESS
    modes: list[tuple[str, int, Hardware | None]] = [("cpu", 0, None)]
    gpu_note = None
    if a.gpu_check:
        from ..sizing.load_machine import machine as ggml_machine

        hw = ggml_machine("gguf")  # the devices llama.cpp's build registered with ggml, as the window plans for
        if hw.gpus:
            modes.append(("gpu", 999, hw))
        else:
            gpu_note = "no GPU found; --gpu-check compared nothing"
    cases: list[dict[str, Any]] = []
    pools: list[dict[str, Any]] = []
    parallel = getattr(a, "parallel", 4) or 0
    for label, path in models:
        spec = spec_from_gguf(path)
        for mode, ngl, machine in modes:
            for profile in profiles:
                done: set[int] = set()
                for want in contexts:
                    n_ctx = min(want, spec.n_ctx_train) if spec.n_ctx_train else want
                    if n_ctx in done:  # a longer context clamped to one already measured
                        continue
                    done.add(n_ctx)
                    cases.append(_case(label, path, n_ctx, want, mode, ngl, machine, profile, a.threads))
                if parallel:
                    n_ctx = min(a.ctx or POOL_CONTEXT, spec.n_ctx_train or POOL_CONTEXT)
                    row = measure_pool(path, n_ctx, parallel, exactness=profile, n_gpu_layers=ngl,
                                       n_threads=a.threads, hardware=machine)
                    pools.append({**row, "model": label, "mode": mode})
    worst = max((c["max_rel_error"] for c in cases), default=0.0)
    pool_worst = max((p["max_rel_error"] for p in pools), default=0.0)
    out: dict[str, Any] = {"max_rel_error": worst, "target": TARGET, "ok": worst <= TARGET,
                           "table": [_line(c) for c in cases],
                           "cases": [{k: c[k] for k in ("model", "mode", "profile", "n_ctx", "n_batch", "kv_type",
                                                        "flash_attn", "max_rel_error", "rel_error", "predicted",
                                                        "actual", "load_s") if k in c}
                                     | ({"clamped_from": c["clamped_from"], "clamp_reason": c["clamp_reason"]}
                                        if "clamped_from" in c else {}) for c in cases],
                           "skipped": skipped}
    if pools:
        out["pool"] = {"parallel": parallel, "max_rel_error": pool_worst, "target": POOL_TARGET,
                       "ok": pool_worst <= POOL_TARGET, "table": [_pool_line(p) for p in pools], "cases": pools}
    if gpu_note:
        out["gpu_check"] = gpu_note
    return out


def _case(label: str, path: Path, n_ctx: int, want: int, mode: str, ngl: int, machine: Hardware | None,
          profile: str, threads: int | None) -> dict[str, Any]:
    row = measure(path, n_ctx, n_gpu_layers=ngl, n_threads=threads, hardware=machine, exactness=profile)
    row.update(model=label, mode=mode)
    if n_ctx != want:
        row["clamped_from"] = want
        row["clamp_reason"] = f"the model was trained on {n_ctx} tokens"
    return row


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _line(c: dict[str, Any]) -> str:
    """One case as a table row: the relative error of each part, planned against allocated."""
    errs = "  ".join(f"{k} {_pct(c['rel_error'][k])}" for k in ("weights", "kv", "compute", "total")
                     if k in c["rel_error"])
    return f"{c['model'][:32]:32} {c['mode']} {c['profile']:5} {c['n_ctx']:>6}  {errs}"


def _pool_line(p: dict[str, Any]) -> str:
    """A pool case as a table row: today's two contexts against the pool, and the pool's plan."""
    return (f"{p['model'][:32]:32} {p['mode']} {p['profile']:5} {p['n_ctx']:>6} window + {p['parallel']}: "
            f"today's two contexts {format_size(p['today_allocated'])} (planned {format_size(p['today_planned'])}), "
            f"one pool {format_size(p['pool_allocated'])} ({p['pool_vs_today']:.2f}x), "
            f"planned {format_size(p['pool_planned'])} "
            f"({_pct(p['plan_rel_error'].get('total', 0.0))}, worst part {p['max_rel_error'] * 100:.1f}%)")

"""``bench sizing``'s pool case: the window plus N API sequences in one context, against today's two.

The engine core opens one llama.cpp context per model with ``n_seq_max = 1 + parallel`` and a KV
stream per sequence (``kv_unified`` off, ``n_ctx = n_ctx_seq x n_seq``). Today the server opens a
second context beside the window's: ``parallel`` streams and a compute buffer of its own
(engine/backends/llama/batch.py, opened as the scheduler does: ``parallel x`` the window's context).
Both layouts are opened here on one loaded model, one context at a time, through the parameters
the backend uses (engine/backends/llama/params.py), and each is read from llama.cpp's own buffer
lines; the plan's figures for the pool are compared with the pool's allocation.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sizing.hardware import Hardware
from ..sizing.memory import Config, estimate, kv_cells
from ..sizing.reality import actual_buffers, compare_to_report
from ..sizing.shape import spec_from_gguf

POOL_TARGET = 0.05  # the pool's plan against its allocation, every part


def _buffers(model, *, n_ctx: int, n_seq: int, n_batch: int, n_threads: int, kv_type: str,
             flash_attn: bool | None, n_gpu_layers: int) -> dict[str, int]:
    """Open a context of ``n_seq`` sequences of ``n_ctx`` tokens each on ``model``, read its KV and compute
    buffers, free it."""
    import llama_cpp as lc

    from ..backends.llama.log import _log_mark, _log_since, parse_buffer_sizes
    from ..backends.llama.params import context_params
    from ..errors import ModelLoadError

    cparams, _fa = context_params(n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads, kv_type=kv_type,
                                  flash_attn=flash_attn, n_gpu_layers=n_gpu_layers, n_seq=n_seq)
    mark = _log_mark()
    ctx = lc.llama_init_from_model(model, cparams)
    if not ctx:
        raise ModelLoadError(f"llama.cpp could not open a {n_ctx}-token context of {n_seq} sequences")
    lc.llama_free(ctx)
    return parse_buffer_sizes(_log_since(mark))


def _planned_buffers(cfg: Config, hw: Hardware) -> int:
    parts = estimate(cfg, hw).parts
    return parts["weights"] + parts["kv"] + parts["compute"]


def measure_pool(path: Path, n_ctx: int, parallel: int, *, exactness: str, n_batch: int = 512,
                 n_gpu_layers: int = 0, kv_type: str = "f16", n_threads: int | None = None,
                 hardware: Hardware | None = None) -> dict[str, Any]:
    """The window plus ``parallel`` API sequences of ``n_ctx`` tokens each: today's two contexts and
    the one pool, as llama.cpp allocates them and as the plan counts them (weights + KV + compute)."""
    import llama_cpp as lc

    from ..backends.llama import init
    from ..backends.llama.log import _log_mark, _log_since, parse_buffer_sizes
    from ..backends.llama.params import model_params
    from ..backends.llama.threadpool import default_threads
    from ..errors import ModelLoadError

    if parallel < 1:
        raise ValueError("the pool case needs at least one API sequence")
    spec = spec_from_gguf(path)
    hw = hardware or Hardware((), 1 << 50, 1 << 50, 1)
    # As LlamaCppBackend loads each profile: the fast one with the repack buffers and flash attention.
    fast = exactness == "fast"
    init()
    mark = _log_mark()
    model = lc.llama_model_load_from_file(str(path).encode(), model_params(n_gpu_layers, fast))
    if not model:
        raise ModelLoadError(f"llama.cpp could not load {path.name}")
    try:
        weights = parse_buffer_sizes(_log_since(mark))
        threads = n_threads or default_threads()

        def opened(ctx: int, n_seq: int) -> dict[str, int]:
            return _buffers(model, n_ctx=ctx, n_seq=n_seq, n_batch=n_batch, n_threads=threads, kv_type=kv_type,
                            flash_attn=True if fast else None, n_gpu_layers=n_gpu_layers)

        window = opened(n_ctx, 1)
        # The old scheduler opened a batch context of ``parallel`` streams of the window's context as
        # llama.cpp padded it; the core opens the pool of 1 + parallel such streams.
        padded = kv_cells(n_ctx)
        batch = opened(padded, parallel)
        pool = opened(padded, 1 + parallel)
    finally:
        lc.llama_model_free(model)

    def total(*reports: dict[str, int]) -> int:
        return actual_buffers(weights)["weights"] + sum(r.get("kv", 0) + r.get("compute", 0) for r in reports)

    cfg = Config(spec, n_ctx, n_gpu_layers, kv_type, n_batch, parallel=parallel, exactness=exactness)
    check = compare_to_report(estimate(cfg, hw), {**weights, **{k: v for k, v in pool.items()
                                                                if not k.startswith("weights")}})
    # Today's plan counted the window's context and a batch context of ``parallel`` streams; the
    # second is a context of parallel sequences without the weights.
    one = Config(spec, n_ctx, n_gpu_layers, kv_type, n_batch, exactness=exactness)
    second = estimate(Config(spec, n_ctx, n_gpu_layers, kv_type, n_batch, parallel=parallel - 1,
                             exactness=exactness), hw).parts
    today_plan = _planned_buffers(one, hw) + second["kv"] + second["compute"]
    today, pooled = total(window, batch), total(pool)
    return {"model": spec.name, "profile": exactness, "n_ctx": n_ctx, "parallel": parallel,
            "flash_attn": cfg.flash_attn,
            "today_allocated": today, "pool_allocated": pooled, "pool_vs_today": round(pooled / today, 4),
            "today_planned": today_plan, "pool_planned": check["predicted"]["total"],
            "plan_rel_error": check["rel_error"], "max_rel_error": check["max_rel_error"],
            "window": {"kv": window.get("kv", 0), "compute": window.get("compute", 0)},
            "batch_context": {"kv": batch.get("kv", 0), "compute": batch.get("compute", 0)},
            "pool": {"kv": pool.get("kv", 0), "compute": pool.get("compute", 0)}}

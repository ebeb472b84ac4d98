"""The one planned load every caller uses: LoadSpec -> plan_load -> open -> ModelInfo.

The window's engine thread, ``engine serve``/``chat``, ``bench tune`` and the
other benchmarks load through :func:`load_model`. It resolves the request's
model (downloading a Hub model first, with progress and cancel), plans it on
the machine the backend sees (engine.sizing.load_plan on load_machine.machine), loads it, retries
once with the next smaller plan when it runs out of memory (load_with_retry, with
engine.sizing.reality's smaller_plan),
keeps the GPU-crash marker while layers are on a device (loading/gpu_guard.py),
checks the plan against what the backend allocated and appends that check to
``memory-plans.jsonl`` in the data folder, so drift shows over time.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..errors import Cancelled, HearthError, ModelLoadError
from ..interface import ModelInfo
from ..sizing.hardware import Hardware
from ..sizing.plan import Plan
from ..sizing import load_machine as planning  # planning.machine: tests put a simulated machine there
from ..sizing.load_machine import shortfall_text
from ..sizing.load_plan import carry_out, plan_spec
from ..sizing.load_spec import AUTO, LoadSpec
from ..sizing.reality import check_against_report, describe_change, is_out_of_memory, smaller_plan
from .gpu_guard import GpuGuard

PLAN_LOG = "memory-plans.jsonl"
PLAN_LOG_MAX_BYTES = 1 << 20  # past this the oldest half of the records goes

Progress = Callable[[int, int, str], None]   # bytes done, bytes total, file name (a Hub download)
T = TypeVar("T")
log = logging.getLogger("hearth.sizing")  # the plan's own log, as the plan-vs-reality check writes it


@dataclass(slots=True)
class LoadResult:
    """A loaded engine, the plan it was loaded with, the plan-vs-reality check, and
    sentences for the user (what was given up, a plan that did not fit)."""
    engine: Any
    plan: Plan | None = None
    check: dict[str, Any] | None = None
    messages: list[str] = field(default_factory=list)
    retried: bool = False      # an out-of-memory error moved the load to a smaller plan
    model: ModelInfo | None = None


def load_model(req: LoadSpec, *, data_dir: Path | None, n_threads: int | None = None,
               threads_poll: int | None = None, progress: Progress | None = None,
               cancel: threading.Event | None = None, loader: Callable[..., Any] | None = None,
               hardware: Hardware | None = None) -> LoadResult:
    """Resolve, plan, load (retrying once with a smaller plan on out-of-memory), check and record.

    ``data_dir``: where the disk prefix store, the plan log and the GPU-crash marker
    live (None: none of them, for a throwaway load). ``n_threads``: the threads when
    the spec says AUTO; ``threads_poll``: the thread pool's poll level when the spec says
    AUTO (None: llama.cpp's own threads). ``loader``: Engine.open (tests pass a wrapper).
    ``hardware``: the machine to plan for (default: as the backend sees it now; the local server
    passes it less what the models it already holds take).
    Raises HearthError (DownloadCancelled for a cancelled download)."""
    if loader is None:
        from ..engine import Engine

        loader = Engine.open
    t0 = time.perf_counter()
    ref = req.model_ref()
    if ref.kind == "hub":
        from ..models.hub import fetch_ref

        ref = fetch_ref(ref, progress=progress, cancel=cancel)
    if cancel is not None and cancel.is_set():
        raise Cancelled("the load was cancelled")
    if req.backend is AUTO:
        from ..models.catalogue import default_backend

        backend = default_backend(ref)
    else:
        backend = req.backend
    result = load_planned(ref, req, backend, n_threads=n_threads, threads_poll=threads_poll,
                          loader=loader, data_dir=data_dir, hardware=hardware)
    result.model = describe_load(result.engine, result, load_ms=(time.perf_counter() - t0) * 1e3)
    if data_dir is not None:
        note = record(result, Path(data_dir) / PLAN_LOG)
        if note:
            result.model = replace(result.model, notes=result.model.notes + (note,))
    return result


def load_planned(ref, req: LoadSpec, backend: str, *, n_threads: int | None, loader: Callable[..., Any],
                 data_dir: Path | None, threads_poll: int | None = None,
                 hardware: Hardware | None = None) -> LoadResult:
    """Plan and load a resolved ``ref`` (a local ModelRef) as ``req`` asks on ``backend``
    (``n_threads``/``threads_poll``: what the spec's AUTO threads are)."""
    messages: list[str] = []
    plan, retried = None, False
    fmt = req.plan_format
    guard = GpuGuard(data_dir) if data_dir is not None else None
    if req.cpu_only:  # this once on the CPU (a GPU failed or stopped the last run); the caller says why
        req = replace(req, gpu_layers=0)
        hardware = replace(hardware or planning.machine(fmt), gpus=()) if fmt is not None else None
    if fmt is not None:
        try:
            plan = plan_spec(req, hardware or planning.machine(fmt), ref)
        except HearthError as e:  # a model the planner cannot read still gets its load (and its message)
            messages.append(f"No memory plan ({e}); the model loads with the settings as chosen.")
    if plan is not None and req.retry_after:
        smaller = smaller_plan(plan, HearthError(req.retry_after))
        if smaller is not None and smaller.fits:
            messages.append(f"The reply ran out of memory ({req.retry_after}); reloaded with "
                            f"{describe_change(plan, smaller)}.")
            plan, retried = smaller, True
        else:
            messages.append(f"The reply ran out of memory ({req.retry_after}) and {_no_smaller(plan)}.")
    if plan is not None and not plan.fits:
        messages.append(f"The memory plan says this does not fit ({shortfall_text(plan)}); it loads with "
                        "your choices as they are.")

    def one(p: Plan | None):
        config = carry_out(p, req, ref, backend, data_dir=data_dir, n_threads=n_threads, threads_poll=threads_poll)
        if req.cpu_only and backend == "hf":
            config = replace(config, device="cpu", max_memory=None)  # transformers places by device, not by layers
        if guard is not None and config.n_gpu_layers and (plan is None or plan.hardware.gpus):
            guard.mark("loading", model=ref.path.name)  # a device that stops the process mid-load
        try:
            engine = loader(config)
        except BaseException:
            if guard is not None:
                guard.clear()  # it failed as an error, not by stopping the process
            raise
        info = engine.backend.describe()
        if guard is not None:
            if info.runtime == "cpu":
                guard.clear()
            else:
                guard.mark("running", model=ref.path.name, device=info.device, runtime=info.runtime)
        return engine

    if plan is None:
        return LoadResult(one(None), messages=messages)
    engine, plan, msg = load_with_retry(one, plan)
    if msg:
        messages.append(msg)
    check = check_against_report(plan, engine.backend.memory_report())
    return LoadResult(engine, plan, check, messages, retried or msg is not None)


def load_with_retry(load: Callable[[Plan], T], plan: Plan) -> tuple[T, Plan, str | None]:
    """``load(plan)``; if it runs out of memory, retry once with the next
    smaller plan. Returns (result, the plan used, a message for the user or None)."""
    try:
        return load(plan), plan, None
    except HearthError as e:
        if not is_out_of_memory(e):
            raise
        smaller = smaller_plan(plan, e)
        if smaller is None or not smaller.fits:
            fixed = ", ".join(sorted(plan.choices.explicit()))
            why = f"with the settings you fixed ({fixed}) there is no smaller plan" if fixed else \
                "there is no smaller plan that fits"
            raise ModelLoadError(f"{e}. {why}; choose a smaller context or quantization, "
                                 "or close other programs") from e
        msg = f"Out of memory with the first plan; loaded with {describe_change(plan, smaller)} instead."
        log.warning("%s (first error: %s)", msg, e)
        return load(smaller), smaller, msg


def _no_smaller(plan: Plan) -> str:
    fixed = ", ".join(sorted(plan.choices.explicit()))
    return (f"with the settings you fixed ({fixed}) there is no smaller plan" if fixed else
            "there is no smaller plan that fits") + "; choose a smaller context or model, or close other programs"


def describe_load(engine, result: LoadResult | None = None, *, load_ms: float = 0.0) -> ModelInfo:
    """What a loaded engine is and where it runs, with the plan it was loaded with."""
    info = engine.describe()
    local = info.local and replace(info.local, plan=plan_view(result) if result is not None else None,
                                   load_ms=load_ms)
    return replace(info, notes=tuple(result.messages) if result is not None else (), local=local)


def plan_view(result: LoadResult) -> dict[str, Any] | None:
    """The plan and its check as plain data (safe to send across threads)."""
    from ..sizing.report import render_table

    plan, check = result.plan, result.check
    if plan is None or check is None:
        return None
    ram = plan.breakdown.ram
    return {"summary": plan.summary(), "status": plan.status, "fits": plan.fits, "n_ctx": plan.n_ctx,
            "n_gpu_layers": plan.n_gpu_layers, "kv_type": plan.kv_type, "prefix_cache": plan.prefix_cache,
            "draft": plan.config.draft.label if plan.config.draft is not None else None,
            "draft_bytes": sum(p.draft for p in plan.breakdown.pools),
            "hardware": plan.hardware.describe(), "ram_total": ram.total, "ram_available": ram.available,
            "predicted": check["predicted"], "actual": check["actual"], "rel_error": check["rel_error"],
            "max_rel_error": check["max_rel_error"], "within_margin": check["within_margin"],
            "table": render_table(plan)}


def record(result: LoadResult, path: Path) -> str | None:
    """Append this load's plan-vs-reality check to the plan log at ``path``; returns a
    message for the user when it could not be written (the load itself stands)."""
    plan, check, model = result.plan, result.check, result.model
    if plan is None or check is None:
        return None
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": plan.spec.name, "quant": plan.spec.quant,
             "backend": plan.config.backend, "runtime": model.runtime if model else None,
             "device": model.device if model else None,
             "hardware": plan.hardware.source, "n_ctx": plan.n_ctx, "n_gpu_layers": plan.n_gpu_layers,
             "kv_type": plan.kv_type, "predicted": check["predicted"], "actual": check["actual"],
             "rel_error": check["rel_error"], "max_rel_error": check["max_rel_error"],
             "within_margin": check["within_margin"], "retried": result.retried}
    try:
        if path.exists() and path.stat().st_size > PLAN_LOG_MAX_BYTES:
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            path.write_text("".join(lines[len(lines) // 2:]), encoding="utf-8")
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
    except OSError as e:
        return f"Could not record the memory check in {path}: {e}"
    return None

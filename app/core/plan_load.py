"""Carrying out the memory plan when the window loads a model. Qt-free.

The load runs this on the engine thread and the settings dialog's preview on
its own thread; both plan through :func:`plan_for_key`, so the plan the dialog
shows is the plan that is loaded.

Every setting left on Auto (context, GPU layers, KV cache type, quantization,
the draft model, the prefix-cache budget, and on transformers the device and
accelerate's max_memory) comes from engine.sizing's plan. A setting the user
fixed goes to the planner as a choice and stays as chosen, even when the plan
says it does not fit (the dialog said so before the load). A load that runs
out of memory is retried once with the next smaller plan
(engine.sizing.reality.load_with_retry), and the message names what was given
up. After each load the plan is checked against what the backend allocated,
and the planner's relative error is appended to ``memory-plans.jsonl`` in the
data folder, so drift shows over time.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from engine.errors import HearthError
from engine.kv.disk_store import DEFAULT_DISK_BUDGET
from engine.sizing.hardware import GPU, Hardware, cpu_only, format_size, probe
from engine.sizing.plan import Choices, Plan, plan_for
from engine.sizing.reality import actual_buffers, check_against_report, describe_change, load_with_retry, \
    smaller_plan

from app.core import gpu_guard
from app.core.model_choice import BUNDLED, HF_QUANTS, effective_backend, infer_source, runs_gguf
from app.core.paths import data_dir

ALL_LAYERS = 1 << 20       # "all": the planner clamps it to every block plus the output head
PLAN_LOG = "memory-plans.jsonl"
PLAN_LOG_MAX_BYTES = 1 << 20  # past this the oldest half of the records goes
PREFIX_STORE = "prefix-cache"
_VENDORS = {"cuda": "nvidia", "rocm": "amd", "metal": "apple"}  # ggml runtime -> the planner's GPU overheads


def prefix_store_dir() -> Path:
    """The disk prefix store: system-prompt KV snapshots that survive a restart."""
    return data_dir() / PREFIX_STORE


def plan_log_path() -> Path:
    """One JSON line per load: the plan against what the backend allocated."""
    return data_dir() / PLAN_LOG


def machine(fmt: str, *, torch_ok: bool = True) -> Hardware:
    """The machine a plan is made for, as the backend that will run it sees it.

    llama.cpp offloads only to the devices its build registered with ggml (a
    CPU build ignores a card NVML would report), so GGUF plans count ggml's GPU
    devices with their free memory now; transformers plans count what NVML,
    sysfs and (``torch_ok``, or once imported) torch see. The settings dialog
    passes ``torch_ok=False`` so that previewing never imports torch. Tests
    replace this function with a simulated machine."""
    if fmt == "hf":
        return probe(allow_torch=torch_ok)
    base = cpu_only()
    try:
        from engine.backends.llama import init
        from engine.backends.llama.devices import gpu_devices

        init()
        devs = gpu_devices()
    except (ImportError, OSError, AttributeError) as e:  # a build without ggml's device API
        return replace(base, notes=(f"llama.cpp's devices could not be listed ({type(e).__name__}: {e}); "
                                    "the plan is for the CPU",))
    gpus = tuple(GPU(i, d.description or d.name, _VENDORS.get(d.runtime, d.runtime), d.total, d.free,
                     unified=d.runtime == "metal") for i, d in enumerate(devs))
    notes = () if gpus else ("llama.cpp has no GPU device here (see the runtime in the model's tooltip): "
                             "the model runs on the CPU from system RAM",)
    return replace(base, gpus=gpus, notes=notes)


def plan_format(key: dict[str, Any]) -> str | None:
    """"gguf" (llama.cpp) or "hf" (transformers): the planner that covers this set-up;
    None for a GGUF file run on transformers, which no planner covers."""
    model = key.get("model") or BUNDLED
    source = key.get("source") or infer_source(model)
    if effective_backend(source, model, key.get("backend") or "auto") == "llama_cpp":
        return "gguf"
    return None if runs_gguf(source, model) else "hf"


def choices_for(key: dict[str, Any], fmt: str) -> Choices:
    """The settings as the planner's choices: Auto is None, anything else is fixed."""
    gl, kv, quant = key.get("gpu_layers"), key.get("kv_type") or "auto", key.get("quant") or "auto"
    return Choices(quant=None if fmt == "gguf" or quant == "auto" else quant, n_ctx=key.get("context"),
                   n_gpu_layers=ALL_LAYERS if gl == "all" else gl, kv_type=None if kv == "auto" else kv,
                   # transformers drafts come from the catalogue only; the app drafts with n-gram there
                   draft="none" if fmt == "hf" or key.get("draft") == "none" else
                   None if key.get("draft") in (None, "auto") else key["draft"])


def plan_for_key(key: dict[str, Any], target: str | None = None, hardware: Hardware | None = None) -> Plan | None:
    """The plan for a settings load key, or None where no planner covers it.

    ``target``: the local file or folder (a Hub model once downloaded); default
    the key's model. ``hardware``: default :func:`machine`. Raises HearthError
    when the model cannot be planned (unreadable, not downloaded yet)."""
    fmt = plan_format(key)
    if fmt is None:
        return None
    if target is None:
        model = key.get("model") or BUNDLED
        target = None if model == BUNDLED else model
    return plan_for(target, hardware or machine(fmt), choices_for(key, fmt))


def engine_kwargs(plan: Plan | None, key: dict[str, Any], backend: str, n_threads: int | None) -> dict[str, Any]:
    """Engine.load's arguments: the plan's values (they hold every fixed choice), or
    without a plan the settings as chosen. The disk prefix store is always on."""
    kw: dict[str, Any] = {"n_threads": n_threads, "disk_cache": prefix_store_dir(),
                          "disk_cache_bytes": DEFAULT_DISK_BUDGET, "backend": backend,
                          "exactness": key.get("exactness") or "exact"}
    draft = key.get("draft") or "auto"
    if plan is None:
        gl, kv, quant = key.get("gpu_layers"), key.get("kv_type") or "auto", key.get("quant") or "auto"
        kw.update(n_ctx=key.get("context"), draft=draft, n_gpu_layers=-1 if gl == "all" else gl or 0,
                  kv_type="f16" if kv == "auto" else kv,
                  quant="none" if backend != "hf" or quant == "auto" else quant)
        return kw
    kw.update(plan.engine_kwargs())
    kw.pop("draft", None)  # the planned draft file is the one the engine's "auto" finds, plus n-gram
    if plan.spec.format == "hf":
        kw["quant"] = kw["quant"] if kw["quant"] in HF_QUANTS else "none"  # pre-quantized: loads as stored
    if draft != "none" and plan.config.draft is None and "draft" in plan.shortfalls:
        draft = "ngram"  # the model draft was given up for memory; n-gram lookup needs none
    kw["draft"] = draft
    return kw


@dataclass(slots=True)
class Loaded:
    """A loaded engine, the plan it was loaded with, the plan-vs-reality check, and
    sentences for the window (what was given up, a plan that did not fit)."""
    engine: Any
    plan: Plan | None = None
    check: dict[str, Any] | None = None
    messages: list[str] = field(default_factory=list)
    retried: bool = False      # an out-of-memory error moved the load to a smaller plan


def load(ref, key: dict[str, Any], backend: str, *, n_threads: int | None, loader: Callable[..., Any],
         retry_after: str | None = None) -> Loaded:
    """Plan, load (retrying once with a smaller plan on out-of-memory) and check.

    ``ref``: a local ModelRef; ``loader``: Engine.load. ``retry_after``: the
    out-of-memory message of a reply on the previous load: start from the plan
    after this one."""
    messages: list[str] = []
    plan, retried = None, False
    fmt, hardware = plan_format(key), None
    if key.get("cpu_only"):  # this once on the CPU (a GPU failed or stopped the last run); the window says why
        key = {**key, "gpu_layers": 0}
        hardware = replace(machine(fmt), gpus=()) if fmt is not None else None
    if fmt is not None:
        try:
            plan = plan_for_key(key, str(ref.path), hardware)
        except HearthError as e:  # a model the planner cannot read still gets its load (and its message)
            messages.append(f"No memory plan ({e}); the model loads with the settings as chosen.")
    if plan is not None and retry_after:
        smaller = smaller_plan(plan, HearthError(retry_after))
        if smaller is not None and smaller.fits:
            messages.append(f"The reply ran out of memory ({retry_after}); reloaded with "
                            f"{describe_change(plan, smaller)}.")
            plan, retried = smaller, True
        else:
            messages.append(f"The reply ran out of memory ({retry_after}) and {_no_smaller(plan)}.")
    if plan is not None and not plan.fits:
        messages.append(f"The memory plan says this does not fit ({shortfall_text(plan)}); it loads with "
                        "your choices as they are.")

    def one(p: Plan | None):
        kw = engine_kwargs(p, key, backend, n_threads)
        if key.get("cpu_only") and backend == "hf":
            kw.update(device="cpu", max_memory=None)  # transformers places by device, not by layers
        if kw.get("n_gpu_layers") and (plan is None or plan.hardware.gpus):
            gpu_guard.mark("loading", model=ref.path.name)  # a device that stops the process mid-load
        try:
            engine = loader(ref, **kw)
        except BaseException:
            gpu_guard.clear()  # it failed as an error, not by stopping the process
            raise
        info = engine.backend.describe()
        if info.runtime == "cpu":
            gpu_guard.clear()
        else:
            gpu_guard.mark("running", model=ref.path.name, device=info.device, runtime=info.runtime)
        return engine

    if plan is None:
        return Loaded(one(None), messages=messages)
    engine, plan, msg = load_with_retry(one, plan)
    if msg:
        messages.append(msg)
    check = check_against_report(plan, engine.backend.memory_report())
    return Loaded(engine, plan, check, messages, retried or msg is not None)


def _no_smaller(plan: Plan) -> str:
    fixed = ", ".join(sorted(plan.choices.explicit()))
    return (f"with the settings you fixed ({fixed}) there is no smaller plan" if fixed else
            "there is no smaller plan that fits") + "; choose a smaller context or model, or close other programs"


def shortfall_text(plan: Plan) -> str:
    """Why a plan does not fit, e.g. 'GPU memory is short by 212 MiB'."""
    p = plan.breakdown.short()
    if p is None:
        return "it fits"
    where = "system RAM" if p.name == "RAM" else f"{p.name} memory"
    return f"{where} is short by {format_size(p.total - p.available)}"


def buffers_total(report: dict[str, int]) -> int:
    """Weights + KV cache + compute buffers as the backend allocated them: what the
    status bar shows, and the same three parts the plan's 'predicted' total counts."""
    a = actual_buffers(report)
    return a["weights"] + a["kv"] + a["compute"]


def plan_view(loaded: Loaded) -> dict[str, Any] | None:
    """The plan and its check as plain data for the window (safe to send across threads)."""
    from engine.sizing.report import render_table

    plan, check = loaded.plan, loaded.check
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


def record(loaded: Loaded, info: dict[str, Any], path: Path | None = None) -> str | None:
    """Append this load's plan-vs-reality check to the plan log; returns a message
    for the window when it could not be written (the load itself stands)."""
    plan, check = loaded.plan, loaded.check
    if plan is None or check is None:
        return None
    path = path or plan_log_path()
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": plan.spec.name, "quant": plan.spec.quant,
             "backend": plan.config.backend, "runtime": info.get("runtime"), "device": info.get("device"),
             "hardware": plan.hardware.source, "n_ctx": plan.n_ctx, "n_gpu_layers": plan.n_gpu_layers,
             "kv_type": plan.kv_type, "predicted": check["predicted"], "actual": check["actual"],
             "rel_error": check["rel_error"], "max_rel_error": check["max_rel_error"],
             "within_margin": check["within_margin"], "retried": loaded.retried}
    try:
        if path.exists() and path.stat().st_size > PLAN_LOG_MAX_BYTES:
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            path.write_text("".join(lines[len(lines) // 2:]), encoding="utf-8")
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
    except OSError as e:
        return f"Could not record the memory check in {path}: {e}"
    return None

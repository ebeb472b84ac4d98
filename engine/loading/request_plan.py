"""The memory plan for a LoadRequest, on the machine as the backend will see it.

Every setting left on Auto (context, GPU layers, KV cache type, quantization,
the draft model, the prefix-cache budget, and on transformers the device and
accelerate's max_memory) comes from engine.sizing's plan. A setting the user
fixed goes to the planner as a choice and stays as chosen, even when the plan
says it does not fit (the caller said so before the load). The window's load,
its settings preview, ``engine serve``/``chat``/``plan`` and the benchmarks all
plan through :func:`plan_request`, so the plan shown is the plan loaded.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..config import EngineConfig, default_exactness
from ..errors import HearthError
from ..kv.disk_store import DEFAULT_DISK_BUDGET
from ..models.catalogue import ModelRef
from ..sizing.hardware import GPU, Hardware, cpu_only, format_size, probe
from ..sizing.load_plan import ALL_LAYERS, PREFIX_STORE, prefix_store_dir  # noqa: F401
from ..sizing.plan import Choices, Plan, plan_for
from .request import BUNDLED, LoadRequest

_VENDORS = {"cuda": "nvidia", "rocm": "amd", "metal": "apple", "rpc": "rpc"}  # ggml runtime -> the planner's overheads


def machine(fmt: str | None, *, torch_ok: bool = True) -> Hardware:
    """The machine a plan is made for, as the backend that will run it sees it.

    llama.cpp offloads only to the devices its build registered with ggml (a
    CPU build ignores a card NVML would report; a Vulkan device such as an
    Intel Arc, an AMD card on Windows or Mesa's lavapipe is one NVML never
    sees), so GGUF plans count ggml's GPU devices with their free memory now;
    transformers plans count what NVML, sysfs and (``torch_ok``, or once
    imported) torch see. The settings dialog passes ``torch_ok=False`` so that
    previewing never imports torch. Tests replace this function with a
    simulated machine."""
    if fmt == "hf":
        return probe(allow_torch=torch_ok)
    base = cpu_only()
    try:
        from ..backends.llama import init
        from ..backends.llama.devices import gpu_devices

        init()
        devs = gpu_devices()
    except (ImportError, OSError, AttributeError) as e:  # a build without ggml's device API
        return replace(base, notes=(f"llama.cpp's devices could not be listed ({type(e).__name__}: {e}); "
                                    "the plan is for the CPU",))
    # In llama.cpp's order (RPC workers first): the plan's split is the tensor_split the load passes.
    names = _log_names(devs)
    gpus = tuple(GPU(i, d.description or d.name, _VENDORS.get(d.runtime, d.runtime), d.total, d.free,
                     unified=d.runtime == "metal", device=names[i]) for i, d in enumerate(devs))
    notes = () if gpus else ("llama.cpp has no GPU device here (see the runtime in the model's tooltip): "
                             "the model runs on the CPU from system RAM",)
    return replace(base, gpus=gpus, notes=notes)


def with_workers(hw: Hardware, machines: Sequence[tuple[str, Sequence[tuple[int, int]]]]) -> Hardware:
    """``hw`` with other machines' devices before its GPUs, where llama.cpp puts them once registered:
    (name, [(free, total) per device]) per machine, as their last check found them. The window's plan
    preview for a load with workers; the load itself plans in the child, where they are registered."""
    extra = [GPU(0, name, "rpc", total, free, device=f"RPC{k}[{name}]")
             for name, devices in machines for k, (free, total) in enumerate(devices)]
    gpus = tuple(replace(g, index=i) for i, g in enumerate([*extra, *hw.gpus]))
    return replace(hw, gpus=gpus, notes=hw.notes if not extra or hw.gpus else ())


def _log_names(devs) -> list[str]:
    """The devices as llama.cpp's load log names their buffers. A worker's device is named by its place
    on that worker and the worker's address ("RPC0[10.0.0.5:50052]"), not by its place here ("RPC1")."""
    seen: dict[str, int] = {}
    out = []
    for d in devs:
        if d.runtime == "rpc":
            k = seen[d.description] = seen.get(d.description, -1) + 1
            out.append(f"RPC{k}[{d.description}]")
        else:
            out.append(d.name)
    return out


def choices_for(req: LoadRequest, fmt: str) -> Choices:
    """The request as the planner's choices: Auto is None, anything else is fixed."""
    gl, kv, quant = req.gpu_layers, req.kv_type or "auto", req.quant or "auto"
    return Choices(quant=None if fmt == "gguf" or quant == "auto" else quant, n_ctx=req.context,
                   n_gpu_layers=ALL_LAYERS if gl == "all" else gl if isinstance(gl, int) else None,
                   kv_type=None if kv == "auto" else kv,
                   # transformers drafts come from the catalogue only; Hearth drafts with n-gram there
                   draft="none" if fmt == "hf" or req.draft == "none" else
                   None if req.draft in (None, "auto") else req.draft,
                   parallel=req.server_parallel, exactness=req.exactness or default_exactness())


def plan_request(req: LoadRequest, target: str | None = None, hardware: Hardware | None = None) -> Plan | None:
    """The plan for a request, or None where no planner covers it.

    ``target``: the local file or folder (a Hub model once downloaded); default
    the request's model. ``hardware``: default :func:`machine`. Raises HearthError
    when the model cannot be planned (unreadable, not downloaded yet)."""
    fmt = req.plan_format
    if fmt is None:
        return None
    if target is None:
        model = req.model or BUNDLED
        target = None if model == BUNDLED else model
    return plan_for(target, hardware or machine(fmt), choices_for(req, fmt))


def engine_config(plan: Plan | None, req: LoadRequest, ref: ModelRef, backend: str, n_threads: int | None,
                  data_dir: Path | None, threads_poll: int | None = None) -> EngineConfig:
    """The EngineConfig that carries out ``req`` for the resolved ``ref`` on ``backend``: the
    request as chosen, then the plan's values (``Plan.to_config``; they hold every fixed choice).
    With a data folder the disk prefix store is on. ``n_threads``/``threads_poll``: the threads, as
    the request or the caller's Auto decided."""
    kv, quant = req.kv_type or "auto", req.quant or "auto"
    draft = req.draft or "auto"
    base = EngineConfig(
        model=ref, backend=backend, n_threads=n_threads, threads_poll=threads_poll,
        exactness=req.exactness or default_exactness(), mmproj=(req.mmproj or "auto") if backend != "hf" else "auto",
        n_ctx=req.context, draft=draft, n_gpu_layers=_layers(req.gpu_layers),
        kv_type="f16" if kv == "auto" else kv, quant="none" if backend != "hf" or quant == "auto" else quant,
        disk_cache=prefix_store_dir(data_dir) if data_dir is not None else None,
        disk_cache_bytes=DEFAULT_DISK_BUDGET)
    if plan is None:
        return base
    if draft != "none" and plan.config.draft is None and "draft" in plan.shortfalls:
        draft = "ngram"  # the model draft was given up for memory; n-gram lookup needs none
    # The planned draft file is the one the engine's "auto" finds, plus n-gram: the request's choice stays.
    return replace(plan.to_config(base), draft=draft)


def _layers(gl: int | str | None) -> int:
    """A request's GPU layers as llama.cpp's count: "all" is -1, Auto (None) with no plan is 0."""
    if gl == "all":
        return -1
    if gl is None or isinstance(gl, int):
        return gl or 0
    raise HearthError(f"GPU layers must be a number or \"all\", got {gl!r}")


def shortfall_text(plan: Plan) -> str:
    """Why a plan does not fit, e.g. 'GPU memory is short by 212 MiB'."""
    p = plan.breakdown.short()
    if p is None:
        return "it fits"
    where = "system RAM" if p.name == "RAM" else f"{p.name} memory"
    return f"{where} is short by {format_size(p.total - p.available)}"

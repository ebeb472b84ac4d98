"""The machine a load is planned for, as the backend will see it, and a plan's shortfall in words.

The plan itself is load_plan.py's (``plan_load``: a LoadSpec -> EngineConfig and Plan);
the window's load, its settings preview, ``engine serve``/``chat``/``plan`` and the benchmarks all plan
on :func:`machine` (tests put a simulated one here), so the plan shown is the plan loaded.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .hardware import GPU, Hardware, cpu_only, format_size, probe
from .plan import Plan

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


def shortfall_text(plan: Plan) -> str:
    """Why a plan does not fit, e.g. 'GPU memory is short by 212 MiB'."""
    p = plan.breakdown.short()
    if p is None:
        return "it fits"
    where = "system RAM" if p.name == "RAM" else f"{p.name} memory"
    return f"{where} is short by {format_size(p.total - p.available)}"

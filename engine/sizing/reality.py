"""The plan checked against reality: what the backend really allocated, and the
next smaller plan after an out-of-memory failure.

``check_against_report`` compares a plan with what the backend actually
allocated; ``smaller_plan`` is the plan to retry with and ``describe_change``
says what changed. The retry itself is engine/loading/load.py's (``load_with_retry``):
sizing never calls back into loading.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from .hardware import format_size
from .memory import MARGIN, Breakdown, estimate
from .plan import Plan, plan_for
from .report import knob_values
from .resolve import Resolved

log = logging.getLogger("hearth.sizing")


def actual_buffers(report: dict[str, int]) -> dict[str, int]:
    """llama.cpp's reported buffers, as the planner predicts them.

    The CPU backend repacks some quant types (Q4_0, Q4_K, IQ4_NL on AVX2)
    into a second, interleaved buffer ("CPU_REPACK") that duplicates their
    bytes in the log. The mapped copy of those tensors is clean page cache the
    kernel can drop, so it is not counted twice.
    """
    weights = report.get("weights", 0) - report.get("weights@CPU_REPACK", 0)
    out = {"weights": weights, "kv": report.get("kv", 0), "compute": report.get("compute", 0)}
    # GPU devices: "CUDA0", "ROCm0", "Metal", "Vulkan0" (llama.cpp), "cuda:0" (torch);
    # host-side: "CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host", "cpu".
    gpu = {k: v for k, v in report.items() if "@" in k and not k.split("@", 1)[1].lower().startswith("cpu")
           and not k.endswith("_Host") and not k.startswith("allocated@")}
    if gpu:
        for part in ("weights", "kv", "compute"):
            out[f"{part}_gpu"] = sum(v for k, v in gpu.items() if k.startswith(part + "@"))
    return out


def compare_to_report(breakdown: Breakdown, report: dict[str, int]) -> dict[str, Any]:
    """Relative errors of the predicted weights, KV and compute buffers
    against ``backend.memory_report()``: (predicted - actual) / actual."""
    actual = actual_buffers(report)
    pred = dict(breakdown.parts)
    if any(k.endswith("_gpu") for k in actual):
        pred["weights_gpu"] = sum(p.weights for p in breakdown.gpus)
        pred["kv_gpu"] = sum(p.kv for p in breakdown.gpus)
        pred["compute_gpu"] = sum(p.compute for p in breakdown.gpus)
    if "kv" in pred:  # llama.cpp: every buffer is allocated up front, so totals compare too
        pred["total"] = pred.get("weights", 0) + pred.get("kv", 0) + pred.get("compute", 0)
        actual["total"] = actual["weights"] + actual["kv"] + actual["compute"]
    rel = {k: round((pred[k] - actual[k]) / actual[k], 4) for k in pred if actual.get(k)}
    worst = max((abs(v) for v in rel.values()), default=0.0)
    return {"predicted": pred, "actual": actual, "rel_error": rel, "max_rel_error": round(worst, 4)}


def device_errors(plan: Plan, report: dict[str, int]) -> dict[str, dict[str, float]]:
    """Per device of a split: the relative error of the planned weights, KV and compute buffers against
    what llama.cpp allocated there (``part@RPC0[host:port]``, ``part@CUDA1``...), by the plan's pool name."""
    out: dict[str, dict[str, float]] = {}
    for g, pool in zip(plan.hardware.gpus, plan.breakdown.gpus):
        if not g.device:
            continue
        errs = {}
        for part in ("weights", "kv", "compute"):
            actual = report.get(f"{part}@{g.device}", 0)
            predicted = getattr(pool, part)
            if actual or predicted:
                errs[part] = round((predicted - actual) / actual, 4) if actual else float("inf")
        out[pool.name] = errs
    return out


def opened_breakdown(plan: Plan, report: dict[str, int]) -> Breakdown:
    """The plan's breakdown for the context that was opened: the planned one, or, where the load
    opened another number of sequences than the plan counts (``n_seq`` in the report: today's engine
    opens the window's context alone and the server's sequences in a context of their own, after the
    load), the same plan re-estimated for that many, so the check compares like with like."""
    opened = report.get("n_seq")
    if not opened or opened == plan.config.n_seq or plan.config.backend != "llama_cpp":
        return plan.breakdown
    return estimate(replace(plan.config, parallel=opened - 1), plan.hardware)


def check_against_report(plan: Plan, report: dict[str, int], *, threshold: float = MARGIN) -> dict[str, Any]:
    """Compare a plan with what was really allocated; warn when off by more than the margin."""
    result = compare_to_report(opened_breakdown(plan, report), report)
    result["within_margin"] = result["max_rel_error"] <= threshold
    if not result["within_margin"]:
        part, err = max(result["rel_error"].items(), key=lambda kv: abs(kv[1]))
        log.warning("memory plan for %s was off by %+.0f%% on %s (predicted %s, llama.cpp allocated %s); "
                    "the %.0f%% safety margin may not cover it", plan.spec.label, err * 100, part,
                    format_size(result["predicted"][part]), format_size(result["actual"][part]),
                    threshold * 100)
    return result


def is_out_of_memory(err: BaseException) -> bool:
    """A load or decode failure caused by memory (llama.cpp, CUDA or torch wording)."""
    msg = str(err).lower()
    return any(s in msg for s in ("not enough memory", "out of memory", "failed to allocate",
                                  "cannot allocate", "outofmemory"))


def is_device_failure(err: BaseException | str) -> bool:
    """A reply that failed because the device did (compute failed, device lost, a CUDA error),
    as opposed to running out of memory or a bad request."""
    msg = str(err).lower()
    return not is_out_of_memory(Exception(msg)) and any(s in msg for s in (
        "device failed", "llama_decode returned -3", "device lost", "devicelost", "cuda error",
        "illegal memory access", "unspecified launch failure"))


def _gpu_failure(err: BaseException) -> bool:
    msg = str(err).lower()
    return any(s in msg for s in ("cuda", "rocm", "hip", "metal", "vulkan", "gpu", "vram"))


def smaller_plan(plan: Plan, err: BaseException | None = None) -> Plan | None:
    """The next smaller plan after an out-of-memory failure, or None.

    Memory that looked free was not (another program, a driver, our own
    estimate): plan again as if the failing pool (the GPUs when the error
    names one, else RAM) had only 85% of what this plan meant to use there.
    Explicit choices stay; if nothing Auto is left to shrink, there is none.
    """
    gpu = bool(plan.hardware.gpus) and (err is None or _gpu_failure(err))
    hw = plan.hardware
    if gpu:
        gpus = tuple(replace(g, free=min(g.free, int(p.total * 0.85)))
                     for g, p in zip(hw.gpus, plan.breakdown.gpus))
        hw = replace(hw, gpus=gpus)
    else:
        hw = replace(hw, ram_available=min(hw.ram_available, int(plan.breakdown.ram.total * 0.85)))
    new = plan_for(Resolved(plan.variants, "retry", known=plan.known), hw, plan.choices, _alternatives_too=False)
    same = (new.config.spec is plan.config.spec and new.config.n_ctx == plan.config.n_ctx and
            new.config.n_gpu_layers == plan.config.n_gpu_layers and new.config.kv_type == plan.config.kv_type
            and new.config.draft is plan.config.draft and new.config.prefix_cache == plan.config.prefix_cache)
    return None if same else new


def describe_change(old: Plan, new: Plan) -> str:
    """'context 32768 -> 16384, GPU layers 29 -> 24' for the user."""
    a, b = knob_values(old), knob_values(new)
    diffs = [f"{k} {a[k]} -> {b[k]}" for k in a if a[k] != b[k]]
    return ", ".join(diffs) or "nothing"


def buffers_total(report: dict[str, int]) -> int:
    """Weights + KV cache + compute buffers as the backend allocated them: what the
    status bar shows, and the same three parts the plan's 'predicted' total counts; plus a vision
    projector's weights and compute buffer (``vision``)."""
    a = actual_buffers(report)
    return a["weights"] + a["kv"] + a["compute"] + report.get("vision", 0)

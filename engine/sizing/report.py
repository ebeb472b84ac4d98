"""How a plan explains itself: one-line reasons, the breakdown table, JSON.

Rendering only: everything here reads a Plan, including what the search
recorded for each knob it gave up (``Plan.shortfalls``); nothing here
searches or estimates.
"""
from __future__ import annotations

from typing import Any

from .hardware import format_size
from .memory import KV_BYTES, MARGIN, Usage
from .plan import Plan
from .search import CTX_COMFORT, Shortfall

KNOB_LABELS = {"quant": "quantization", "context": "context", "gpu_layers": "GPU layers",
               "kv": "KV cache", "draft": "draft model", "prefix_cache": "prefix cache"}


def knob_values(plan: Plan) -> dict[str, str]:
    """Each knob's value as people read it, by its label (describe_change compares two plans with it)."""
    d = plan.config.draft
    return {"quantization": plan.spec.quant, "context": str(plan.n_ctx), "GPU layers": plan.gpu_layers_text,
            "KV cache": plan.kv_type, "draft": d.label if d else "none",
            "prefix cache": format_size(plan.prefix_cache) if plan.prefix_cache else "off"}


def _need(sf: Shortfall) -> str:
    if sf.pool is None:
        return "would not leave room for the choices that rank above it"
    return f"would need {format_size(sf.need)} of {_pool_name(sf.pool)} ({format_size(sf.available)} available)"


def _pool_name(name: str) -> str:
    return "system RAM" if name == "RAM" else f"{name} memory"


def _pool_label(p: Usage) -> str:
    return _pool_name(p.name)


def _mine(plan: Plan) -> str:
    return "your choice" + ("" if plan.fits else "; it does not fit (see below)")


def _why_quant(plan: Plan) -> str:
    s, sf = plan.spec, plan.shortfalls
    if "quant" in plan.choices.explicit():
        why = _mine(plan)
    elif len(plan.variants) == 1:
        why = "this file's own quantization" if s.format == "gguf" else "the only variant available"
    elif "quant" not in sf:
        why = "the highest-quality variant" + (" and it fits" if plan.fits else "")
    else:
        why = f"{sf['quant'].value} {_need(sf['quant'])}"
    if s.format == "hf" and s.quant == "none":
        why += "; unquantized: " + ("16-bit on the GPU" if plan.n_gpu_layers else "float32 on the CPU")
    return why


def _why_context(plan: Plan) -> str:
    # Below the comfort line the search gave up ctx_floor, above it ctx_high
    # (which has a step to give up only when Auto's target is above CTX_COMFORT).
    s, sf = plan.spec, plan.shortfalls
    if "context" in plan.choices.explicit():
        return _mine(plan)
    if "ctx_floor" in sf:
        return f"{sf['ctx_floor'].value} {_need(sf['ctx_floor'])}; shrinking the context is the last resort"
    if "ctx_high" in sf:
        return (f"{sf['ctx_high'].value} {_need(sf['ctx_high'])}; context above {CTX_COMFORT} goes before "
                "KV precision")
    # Auto's target, which the plan reached
    return ("the model's training context" if s.n_ctx_train and plan.n_ctx == s.n_ctx_train
            else f"Auto's ceiling (the model allows {s.n_ctx_train})" if s.n_ctx_train else "Auto's default")


def _why_gpu_layers(plan: Plan) -> str:
    s, sf = plan.spec, plan.shortfalls
    n, k = s.n_layers, plan.n_gpu_layers
    if not plan.hardware.gpus:
        return "no GPU: everything runs on the CPU from system RAM"
    if "gpu_layers" in plan.choices.explicit():
        return _mine(plan)
    if plan.config.all_on_gpu or (s.format == "hf" and k >= n):
        return "every block" + (" and the output head" if s.format == "gguf" else "") + " on the GPU"
    if k == 0:
        return f"the GPU cannot hold one block beside its runtime: one block {_need(sf['gpu_layers'])}"
    on = min(k - 1, n) if s.format == "gguf" else min(k, n)  # llama.cpp offloads the output head first
    head = " and the output head" if s.format == "gguf" else ""
    return (f"the GPU holds {on} of {n} blocks{head}; the other {n - on} run on the CPU (slower, same answers); "
            f"one more {_need(sf['gpu_layers'])}")


def _why_kv(plan: Plan) -> str:
    if "kv" in plan.choices.explicit():
        why = _mine(plan)
    elif plan.spec.format == "hf":
        why = ("the compute dtype: 16-bit on the GPU" if plan.n_gpu_layers else
               "the compute dtype: float32 on the CPU") + " (transformers' dynamic cache)"
    elif plan.kv_type == "f16":
        why = "full precision"
    else:
        why = f"halves the KV cache; {plan.shortfalls['kv'].value} {_need(plan.shortfalls['kv'])}"
    kv_total = sum(p.kv for p in plan.breakdown.pools)
    return f"{format_size(kv_total)} for {plan.n_ctx} tokens: {why}"


def _draft(plan: Plan) -> tuple[str, str]:
    d, sf = plan.config.draft, plan.shortfalls
    if d is not None:
        where = next((_pool_label(p) for p in plan.breakdown.pools if p.draft and p.is_gpu), "system RAM")
        why = (_mine(plan) if "draft" in plan.choices.explicit() else "fits beside the model") + \
            f" (in {where}, with its own KV cache)"
        return d.label, why
    if "draft" in sf:
        return "none", f"dropped: {sf['draft'].value} {_need(sf['draft'])}"
    return "none", plan.draft_note or _mine(plan)


def _why_prefix_cache(plan: Plan) -> str:
    pc, sf = plan.prefix_cache, plan.shortfalls
    per_prompt = plan.spec.kv_bytes_per_token(KV_BYTES.get(plan.kv_type, 2.0)) * 2048
    if "prefix_cache" in plan.choices.explicit():
        return _mine(plan)
    if "prefix_cache" not in sf:
        return f"room for about {max(1, int(pc // per_prompt))} cached 2k-token prompts (KV snapshots in RAM)"
    best = sf["prefix_cache"]
    return f"{format_size(int(best.value))} {_need(best)}; it is the first thing given up"


def reasons(plan: Plan) -> dict[str, tuple[str, str]]:
    """knob -> (value, one-line reason), in the order the table lists them."""
    return {"quant": (plan.quant_text, _why_quant(plan)),
            "context": (str(plan.n_ctx), _why_context(plan)),
            "gpu_layers": (plan.gpu_layers_text, _why_gpu_layers(plan)),
            "kv": (plan.kv_type, _why_kv(plan)),
            "draft": _draft(plan),
            "prefix_cache": (format_size(plan.prefix_cache) if plan.prefix_cache else "off", _why_prefix_cache(plan))}


# -- the table -----------------------------------------------------------------------

def _cell(n: int) -> str:
    return format_size(n) if n else "-"


def _streams(plan: Plan) -> str:
    """", window + 4 API streams" where the context holds API sequences beside the window's."""
    n = plan.config.parallel
    return f", window + {n} API stream{'s' if n > 1 else ''}" if n else ""


def render_table(plan: Plan) -> str:
    """The breakdown table, the status, the reasons, notes and alternatives, as plain text."""
    s, hw, bd = plan.spec, plan.hardware, plan.breakdown
    pools = bd.pools
    fmt = "GGUF, llama.cpp" if s.format == "gguf" else "transformers"
    where = ", not downloaded: catalogue metadata" if plan.known is not None and not s.source.startswith("/") else ""
    lines = [f"{s.name} {s.quant} ({fmt}): {format_size(s.weight_bytes)} of weights{where}",
             f"Machine: {hw.describe()}", ""]
    rows: list[tuple[str, list[str]]] = []
    if hw.gpus:
        rows.append(("weights on the GPU", [_cell(p.weights) if p.is_gpu else "-" for p in pools]))
    rows += [
        ("weights on the CPU", ["-" if p.is_gpu else _cell(p.weights) for p in pools]),
        (f"KV cache ({plan.kv_type}{_streams(plan)})", [_cell(p.kv) for p in pools]),
        ("compute buffers", [_cell(p.compute) for p in pools]),
        ("runtime overhead", [_cell(p.overhead) for p in pools]),
        ("draft model", [_cell(p.draft) for p in pools]),
        ("prefix cache", [_cell(p.prefix_cache) for p in pools]),
    ]
    if hw.unified:
        rows.append(("GPU share (same memory)", [_cell(p.shared) for p in pools]))
    rows += [
        (f"safety margin ({MARGIN:.0%})", [_cell(p.margin) for p in pools]),
        ("total", [format_size(p.total) for p in pools]),
        ("available", [format_size(p.available) for p in pools]),
        ("", ["fits" if p.fits else f"short {format_size(p.total - p.available)}" for p in pools]),
    ]
    w0 = max(len(r[0]) for r in rows)
    widths = [max(len(p.name), *(len(r[1][i]) for r in rows)) for i, p in enumerate(pools)]
    lines.append(" " * w0 + "".join(f"  {p.name:>{w}}" for p, w in zip(pools, widths)))
    for label, cells in rows:
        lines.append(f"{label:<{w0}}" + "".join(f"  {c:>{w}}" for c, w in zip(cells, widths)))
    lines += ["", f"Status: {plan.status}: {_status_detail(plan)}", "", "Choices:"]
    why_each = reasons(plan)
    wv = max(len(v) for v, _ in why_each.values())
    for knob, (value, why) in why_each.items():
        lines.append(f"  {KNOB_LABELS[knob]:<13} {value:<{wv}}  {why}")
    if s.format == "hf":
        device, mm = plan.hf_placement()
        budget = ", ".join(f"{k}: {format_size(v)}" for k, v in mm.items()) if mm else "not needed"
        lines.append(f"  {'device':<13} {device:<{wv}}  accelerate max_memory: {budget}")
    for title, items in (("Notes:", plan.notes), ("What would fit instead:", plan.alternatives)):
        if items:
            lines += ["", title] + [f"  - {x}" for x in items]
    return "\n".join(lines)


def _status_detail(plan: Plan) -> str:
    bd = plan.breakdown
    if not plan.fits:
        p = bd.short()
        return f"{_pool_label(p)} is short by {format_size(p.total - p.available)}" if p else "too large"
    if not plan.hardware.gpus:
        return "runs on the CPU from system RAM"
    if plan.config.all_on_gpu or (plan.spec.format == "hf" and plan.n_gpu_layers >= plan.spec.n_layers):
        return "everything on the GPU"
    on = sum(p.layers for p in bd.gpus)
    return f"{on} of {plan.spec.n_layers} blocks on the GPU, the rest on the CPU"


def plan_dict(plan: Plan) -> dict[str, Any]:
    """The plan as JSON-ready data (``python -m engine plan --json``)."""
    s, bd = plan.spec, plan.breakdown
    pools = [{"name": p.name, "is_gpu": p.is_gpu, "layers": p.layers, "weights": p.weights, "kv": p.kv,
              "compute": p.compute, "overhead": p.overhead, "draft": p.draft, "prefix_cache": p.prefix_cache,
              "shared": p.shared, "margin": p.margin, "total": p.total, "available": p.available,
              "fits": p.fits} for p in bd.pools]
    out: dict[str, Any] = {
        "model": {"name": s.name, "quant": s.quant, "format": s.format, "source": s.source,
                  "weight_bytes": s.weight_bytes, "n_layers": s.n_layers, "n_ctx_train": s.n_ctx_train,
                  "kv_bytes_per_token_f16": int(s.kv_bytes_per_token(2.0)),
                  "catalogue_id": plan.known.id if plan.known else None},
        "hardware": plan.hardware.to_dict(),
        "status": plan.status, "fits": plan.fits,
        "choices": {k: {"value": v, "reason": why, "auto": k not in plan.choices.explicit()}
                    for k, (v, why) in reasons(plan).items()},
        "config": {"backend": plan.config.backend, "n_ctx": plan.n_ctx, "n_gpu_layers": plan.n_gpu_layers,
                   "kv_type": plan.kv_type, "flash_attn": plan.config.flash_attn, "n_batch": plan.config.n_batch,
                   "prefix_cache": plan.prefix_cache, "draft": plan.draft_source,
                   "parallel": plan.config.parallel, "n_seq": plan.config.n_seq,
                   "exactness": plan.config.exactness},
        "pools": pools, "margin_fraction": MARGIN,
        "alternatives": plan.alternatives, "notes": plan.notes,
    }
    kw = plan.config_values()
    if kw.get("max_memory"):
        kw["max_memory"] = {str(k): v for k, v in kw["max_memory"].items()}
    out["engine_config"] = kw
    return out

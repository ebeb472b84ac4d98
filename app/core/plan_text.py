"""How the settings dialog words a memory plan. Qt-free (returns rich text for labels).

The headline counts what the status bar will count once the model is loaded
(weights + KV cache + compute buffers) and then, separately, what the plan
adds on top (prefix-cache budget, runtime overhead, safety margin), so the two
figures can be compared. A plan that does not fit says why, names the choices
the user fixed, and lists what would fit instead: the refusal the user sees
before anything loads.
"""
from __future__ import annotations

from engine.sizing import Plan, knob_values

from engine.loading import shortfall_text
from app.core.text_utils import human_bytes

WARN = "#d9480f"
# Choices.explicit()'s names -> report.knob_values()'s labels
_VALUE_KEYS = {"quant": "quantization", "context": "context", "gpu_layers": "GPU layers", "kv": "KV cache",
               "draft": "draft", "prefix_cache": "prefix cache"}


def model_buffers(plan: Plan) -> int:
    """The plan's weights + KV cache + compute buffers, every pool together."""
    parts = plan.breakdown.parts
    return parts.get("weights", 0) + parts.get("kv", 0) + parts.get("compute", 0)


def fixed_choices(plan: Plan) -> str:
    """'context 32768, GPU layers 30/30 + head' for the knobs the user fixed ('' if none)."""
    values = knob_values(plan)
    return ", ".join(f"{_VALUE_KEYS[k]} {values[_VALUE_KEYS[k]]}" for k in sorted(plan.choices.explicit()))


def pools_text(plan: Plan) -> str:
    """'GPU: 596 MiB of 600 MiB; RAM: 1.02 GiB of 21.7 GiB'. Split over several devices (other machines'
    workers, several GPUs), each one's layers too: 'worker 10.0.0.5:50052: 15 layers, 412 MiB of 8.00 GiB'."""
    split = len(plan.breakdown.gpus) > 1 or any(g.vendor == "rpc" for g in plan.hardware.gpus)

    def held(p) -> str:
        if not (split and p.is_gpu):
            return ""
        return f"{p.layers} layers{' + head' if p.positions > p.layers else ''}, "

    return "; ".join(f"{p.name}: {held(p)}{human_bytes(p.total)} of {human_bytes(p.available)}"
                     for p in plan.breakdown.pools)


def headline(plan: Plan) -> str:
    """The Memory row's text for a plan (rich text)."""
    bd = plan.breakdown
    extra = sum(p.total for p in bd.pools) - model_buffers(plan)
    status = f"<b>{plan.status}</b>" if plan.fits else f"<b style='color:{WARN}'>{plan.status}</b>"
    text = (f"{status}: weights + KV cache + compute buffers {human_bytes(model_buffers(plan))} (what the status "
            f"bar shows once loaded), plus prefix cache up to {human_bytes(plan.prefix_cache)}, runtime "
            f"overhead and safety margin: {human_bytes(extra)} more.<br>{pools_text(plan)} available now.<br>"
            f"<i>{plan.summary()}</i>")
    if not plan.fits:
        text += "<br>" + refusal(plan, html=True)
    return text


def refusal(plan: Plan, *, html: bool = False) -> str:
    """Why the plan does not fit, which choices are the user's, and what would fit instead."""
    mine = fixed_choices(plan)
    parts = [f"It does not fit: {shortfall_text(plan)}."]
    if mine:
        parts.append(f"Your choices are kept as they are ({mine}); Hearth does not change them.")
    if plan.alternatives:
        parts.append("What would fit: " + "; ".join(plan.alternatives) + ".")
    text = " ".join(parts)
    return f"<span style='color:{WARN}'>{text}</span>" if html else text

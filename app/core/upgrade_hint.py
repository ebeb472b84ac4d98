"""Whether this machine's GPU could run a larger model than the one loaded. Qt-free.

The sizing planner answers it: every model in the catalogue at Q4_K_M (the
usual download) is planned for this machine, with no draft, and the largest
that fits entirely on the GPU wins if it has at least MIN_GAIN times the
loaded model's parameters. No GPU, or nothing that much larger fitting, means
no hint: the welcome page does not advertise what this machine cannot run.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.sizing import STATUS_FITS, Choices, Hardware, Resolved, format_size, known_models, plan_for

QUANT = "Q4_K_M"
MIN_GAIN = 3.0


@dataclass(slots=True, frozen=True)
class Upgrade:
    model_id: str
    name: str
    repo: str
    quant: str
    weight_bytes: int
    n_params: int
    n_ctx: int
    gpu: str
    gpu_bytes: int

    def text(self, loaded_params: int) -> str:
        """The hint as the welcome page shows it."""
        return (f"This computer's GPU ({self.gpu}, {format_size(self.gpu_bytes)}) could run {self.name} "
                f"({self.quant}, {format_size(self.weight_bytes)}) entirely on the GPU with a "
                f"{self.n_ctx:,}-token context: about {self.n_params / max(1, loaded_params):.0f}× the "
                f"parameters of the model loaded now. Get it from the Hugging Face repository "
                f"{self.repo}, then choose it in Settings → Model.")


def larger_model(hw: Hardware, loaded_params: int) -> Upgrade | None:
    """The largest catalogue model that fits fully on ``hw``'s GPU and is at least
    MIN_GAIN times larger than ``loaded_params`` (None: no such model, or no GPU)."""
    if not hw.gpus:
        return None
    best: Upgrade | None = None
    for m in known_models():
        variants = [v for v in m.variants if v.quant == QUANT and v.format == "gguf"]
        if not variants or variants[0].n_params < MIN_GAIN * loaded_params:
            continue
        if best is not None and variants[0].n_params <= best.n_params:
            continue
        plan = plan_for(Resolved(variants, "catalogue", known=m), hw, Choices(draft="none"),
                        _alternatives_too=False)
        if plan.status == STATUS_FITS:
            gpu = hw.gpus[0]
            best = Upgrade(m.id, m.name, m.gguf_repo or m.hf_repo, QUANT, variants[0].weight_bytes,
                           variants[0].n_params, plan.n_ctx, gpu.name, gpu.total)
    return best


def hint_for(model_path: str, hw: Hardware) -> str | None:
    """The welcome page's hint for the model loaded from ``model_path`` (None: no hint)."""
    from engine.sizing import resolve_spec

    spec = resolve_spec(model_path).variants[0]
    up = larger_model(hw, spec.n_params)
    return up.text(spec.n_params) if up is not None else None

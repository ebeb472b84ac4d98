"""A rough memory estimate for the settings dialog. Qt-free.

This is deliberately simple (weights + f16 KV cache + a compute allowance) and
labelled an estimate in the window; engine/sizing.py will replace it with a
real plan that is checked against what the backend allocates.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.engine import DEFAULT_CTX

# llama.cpp's compute buffer for small models measured ~100 MiB at 2k context;
# budget a flat allowance rather than pretend to model it.
COMPUTE_ALLOWANCE = 128 * 1024 * 1024


def auto_context(n_ctx_train: int) -> int:
    """What the engine picks for 'Auto' (mirrors Engine.load)."""
    return min(n_ctx_train or DEFAULT_CTX, DEFAULT_CTX)


@dataclass(slots=True, frozen=True)
class Estimate:
    weights: int
    kv: int
    compute: int
    n_ctx: int
    available: int  # system RAM available now

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute

    @property
    def fits(self) -> bool:
        return self.total <= self.available


def estimate(info, n_ctx: int | None) -> Estimate:
    """``info`` is an engine.models.gguf.ModelInfo; ``n_ctx`` None means Auto."""
    import psutil

    ctx = n_ctx or auto_context(info.n_ctx_train)
    return Estimate(weights=int(info.weight_bytes), kv=int(info.kv_bytes_per_token(2.0) * ctx),
                    compute=COMPUTE_ALLOWANCE, n_ctx=ctx,
                    available=int(psutil.virtual_memory().available))

"""A quick memory estimate for one GGUF, from the planner's own memory model.

The full plan (engine.sizing.plan; the settings dialog makes it off the GUI thread)
searches every knob and takes most of a second. This asks the same memory
model (engine.sizing.memory) about one configuration only: the context the
plan aims for under Auto, every block in RAM, no draft and no prefix cache. That
is quick enough for the GUI thread, so the window shows a number at once,
and the number is the planner's, not a second estimate that could disagree.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..sizing.hardware import cpu_only
from ..sizing.memory import Config
from ..sizing.memory import estimate as planner_estimate
from ..sizing.search import CTX_COMFORT, CTX_MAX_AUTO
from ..sizing.shape import spec_from_gguf


def auto_context(n_ctx_train: int) -> int:
    """The context the memory plan aims for under 'Auto' before counting memory (the
    search's target; the full plan may give some of it up when memory is short)."""
    return min(n_ctx_train or CTX_COMFORT, CTX_MAX_AUTO)


@dataclass(slots=True, frozen=True)
class Estimate:
    weights: int
    kv: int
    compute: int    # the rest the planner counts in RAM: compute buffers, runtime overhead, safety margin
    n_ctx: int
    available: int  # system RAM available now

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute

    @property
    def fits(self) -> bool:
        return self.total <= self.available


def quick_estimate(info, n_ctx: int | None) -> Estimate:
    """``info`` is an engine.models.gguf.GgufInfo; ``n_ctx`` None means Auto.

    The planner's RAM pool for that file at that context, all on the CPU
    (``total`` is the pool's total, margin included)."""
    ctx = n_ctx or auto_context(info.n_ctx_train)
    ram = planner_estimate(Config(spec_from_gguf(info.path), ctx, 0), cpu_only()).ram
    return Estimate(weights=ram.weights, kv=ram.kv, compute=ram.total - ram.weights - ram.kv, n_ctx=ctx,
                    available=ram.available)

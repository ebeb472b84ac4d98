"""The search: which value each knob gets, in a fixed order of what is given up first.

When memory is short, things are given up in this fixed order, first to last:

1. Prefix-cache budget (512 MiB -> 128 MiB -> off). It only saves
   re-reading prompts the user already sent; answers do not change.
2. The draft model. Speculative decoding is pure speed (1.5-2x at best);
   dropping it never changes an answer.
3. Context above 8k tokens (halving down to 8192). Most chats never fill
   8k; a longer window is a luxury next to the rest.
4. KV cache precision (f16 -> q8_0). Near-lossless, but it changes the
   numbers of every token and, on the CPU, needs flash attention, which
   gives up the bit-identical batched logits that keep the prefix cache and
   speculative decoding exact. Halves the KV cache.
5. Weight quantization, one step at a time (F16 -> Q8_0 -> Q4_K_M, or
   none -> int8 -> int4 for transformers), never below ~4 bits on Auto. A smaller quant
   costs a little quality; the next step costs much more speed.
6. GPU layers, one block at a time to the CPU ("fits with offload"). Each
   block on the CPU runs 3-10x slower, but answers stay the same.
7. Context below 8k (4096, then 2048). Last, because a short window makes
   the model forget the conversation, which users notice more than speed.

Below the floor of every step the plan says "does not fit".

Besides the chosen values, the search records what each knob gave up: its
better value and how short memory would be with it (``Shortfall``). The
plan carries that as plain data and the report renders it; neither has to
run the search again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import default_exactness
from ..errors import HearthError
from .hardware import MiB, Hardware
from .load_spec import AUTO, Auto, chosen
from .memory import Breakdown, Config, estimate
from .shape import ModelSpec

CTX_COMFORT = 8192          # what a chat needs; above is luxury, below is loss
CTX_FLOOR = 2048            # below this a chat model is not useful
CTX_MAX_AUTO = 32768        # Auto never reserves more than this, whatever the model allows
PREFIX_CACHE_STEPS = (512 * MiB, 128 * MiB, 0)
KV_AUTO = ("f16", "q8_0")   # q4_0 costs visible quality; only by explicit choice


@dataclass(slots=True, frozen=True)
class Choices:
    """The search's knobs that a LoadSpec fixed, for one planner format; AUTO: the search decides.

    Not a second spelling of the user's choice: ``load_plan.choices(spec, fmt)`` makes it from the spec
    and holds what the search works in: llama.cpp's layer count ("all" is a count the search clamps), a
    quantization as a variant's label (a GGUF's Q4_K_M as well, for ``engine plan --quant``), no model
    draft on transformers. Auto is the spec's own AUTO here too. A plan keeps it so the retry can plan
    again with the same fixed knobs."""

    quant: str | Auto = AUTO
    n_ctx: int | Auto = AUTO
    n_gpu_layers: int | Auto = AUTO    # llama.cpp meaning; > n_layers puts the head on the GPU too
    kv_type: str | Auto = AUTO
    draft: str | Auto = AUTO           # "none", or a path / catalogue id
    prefix_cache: int | Auto = AUTO    # bytes
    n_batch: int = 512
    parallel: int = 0                  # API sequences beside the window's (not a knob: planned for)
    exactness: str = field(default_factory=default_exactness)  # the profile decides flash attention

    def explicit(self) -> frozenset[str]:
        """The knobs the user fixed, by the names the plan's reasons use."""
        return frozenset(v for k, v in KNOB_NAMES.items() if getattr(self, k) is not AUTO)


# Choices' fixed knobs -> the names the plan's reasons use.
KNOB_NAMES = {"quant": "quant", "n_ctx": "context", "n_gpu_layers": "gpu_layers", "kv_type": "kv",
              "draft": "draft", "prefix_cache": "prefix_cache"}


@dataclass(slots=True, frozen=True)
class Shortfall:
    """A better value of one knob that the search gave up, and what it lacked.

    ``pool`` is the pool that would overflow most with that value, every other
    knob as planned ("RAM", "GPU", "GPU 1"), with that pool's total and what it
    has available. ``pool`` is None when every pool would fit: the value lost
    only to the choices that rank above it.
    """

    value: int | str        # a context, a GPU layer count, a quant, a KV type, a draft's label, or bytes
    pool: str | None = None
    need: int = 0
    available: int = 0

    @property
    def lacks(self) -> int:
        """Bytes the pool is short by (0 when none is)."""
        return max(0, self.need - self.available)


def _ctx_target(spec: ModelSpec) -> int:
    return min(spec.n_ctx_train or CTX_COMFORT, CTX_MAX_AUTO)


def _halvings(top: int, bottom: int) -> list[int]:
    out, v = [], top
    while v > bottom:
        out.append(v)
        v //= 2
    return out + [bottom]


class Search:
    """Greedy lexicographic search over the knobs, most important first.

    Memory is monotone in every knob except the GPU layer count (more layers
    on the GPU: more GPU memory, less RAM). So for each knob, from the most
    important down, we keep its best value for which *some* setting of the
    later knobs fits: their cheapest ones, with the GPU layers at the most
    the GPUs can hold. That yields the lexicographically best fitting plan,
    which is exactly "give things up in the fixed order".
    """

    # Most important first = the reverse of the give-up order in the module docstring.
    ORDER = ("ctx_floor", "gpu_layers", "quant", "kv", "ctx_high", "draft", "prefix_cache")

    def __init__(self, variants: list[ModelSpec], hw: Hardware, ch: Choices,
                 draft: ModelSpec | None, draft_auto: bool) -> None:
        self.hw, self.ch = hw, ch
        spec0 = variants[0]
        target = chosen(ch.n_ctx) or _ctx_target(spec0)
        comfort = min(CTX_COMFORT, target)
        self.comfort = comfort
        v: dict[str, list[Any]] = {}
        floors = sorted({comfort, *[c for c in (4096, CTX_FLOOR) if c < comfort]}, reverse=True)
        v["ctx_floor"] = [ch.n_ctx] if ch.n_ctx is not AUTO else floors
        v["ctx_high"] = [ch.n_ctx] if ch.n_ctx is not AUTO else _halvings(target, comfort)
        max_ngl = spec0.n_layers + 1
        v["gpu_layers"] = ([min(ch.n_gpu_layers, max_ngl)] if ch.n_gpu_layers is not AUTO and hw.gpus
                           else list(range(max_ngl, -1, -1)) if hw.gpus else [0])
        v["quant"] = list(range(len(variants)))
        # transformers keeps the KV cache in its compute dtype (see config()); not a choice there.
        if ch.kv_type is not AUTO and spec0.format == "hf":
            raise HearthError("the transformers backend keeps the KV cache in the model's compute dtype; "
                              "the KV cache type is a choice for GGUF models")
        v["kv"] = [ch.kv_type] if ch.kv_type is not AUTO else list(KV_AUTO if spec0.format == "gguf" else ("f16",))
        v["draft"] = [draft, None] if draft is not None and draft_auto else [draft]
        v["prefix_cache"] = [ch.prefix_cache] if ch.prefix_cache is not AUTO else list(PREFIX_CACHE_STEPS)
        self.values, self.variants = v, variants
        self.state: dict[str, Any] = {k: vals[-1] for k, vals in v.items()}
        self.decided: set[str] = set()
        self.evaluations = 0

    def config(self, st: dict[str, Any]) -> Config:
        """The concrete configuration a search state stands for."""
        ctx = st["ctx_high"] if st["ctx_floor"] >= self.comfort else st["ctx_floor"]
        spec = self.variants[st["quant"]]
        kv = st["kv"]
        if spec.format == "hf":  # 16-bit with a block on the GPU, float32 on the CPU
            kv = "f16" if st["gpu_layers"] else "f32"
        return Config(spec, ctx, st["gpu_layers"], kv, self.ch.n_batch, st["draft"], st["prefix_cache"],
                      self.ch.parallel if spec.format == "gguf" else 0,  # transformers serves one sequence
                      self.ch.exactness)

    def estimate(self, st: dict[str, Any]) -> Breakdown:
        """The memory model's breakdown for a search state."""
        self.evaluations += 1
        return estimate(self.config(st), self.hw)

    def best_layers(self, st: dict[str, Any]) -> int | None:
        """Most GPU layers for which every pool fits, or None.

        GPU use grows with layers, so a binary search finds the most the GPUs
        hold. RAM usually shrinks as layers leave it, but not always:
        bitsandbytes keeps CPU-offloaded blocks in float32, so one block on
        the GPU can need more RAM than none. Hence the walk down when RAM
        does not fit at the top."""
        vals = self.values["gpu_layers"]  # descending
        lo, hi = 0, len(vals) - 1       # find the first index whose GPUs fit
        if not self._gpus_fit({**st, "gpu_layers": vals[hi]}):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if self._gpus_fit({**st, "gpu_layers": vals[mid]}):
                hi = mid
            else:
                lo = mid + 1
        for n in vals[lo:]:
            if self.estimate({**st, "gpu_layers": n}).ram.fits:
                return n
        return None

    def _gpus_fit(self, st: dict[str, Any]) -> bool:
        return all(p.fits for p in self.estimate(st).gpus)

    def feasible(self, st: dict[str, Any]) -> bool:
        """Whether some setting of the knobs not yet decided makes ``st`` fit."""
        if "gpu_layers" in self.decided:
            return self.estimate(st).fits
        return self.best_layers(st) is not None

    def run(self) -> dict[str, Any]:
        """Decide every knob in ORDER; returns the final state (knob -> value)."""
        for knob in self.ORDER:
            vals = self.values[knob]
            if knob == "gpu_layers":
                n = self.best_layers(self.state)
                self.state[knob] = n if n is not None else vals[-1]
            else:
                for val in vals:
                    if self.feasible({**self.state, knob: val}):
                        self.state[knob] = val
                        break
                else:
                    self.state[knob] = vals[-1]
            self.decided.add(knob)
        return self.state

    def shortfalls(self, st: dict[str, Any]) -> dict[str, Shortfall]:
        """For each knob not at its best in ``st``: its next-better value and that
        value's shortfall, every other knob as in ``st``.

        The prefix cache is measured from its full budget instead: its steps
        are "on, smaller, off", and "the full cache would need X" is what
        explains a smaller one or none.
        """
        out: dict[str, Shortfall] = {}
        for knob in self.ORDER:
            vals = self.values[knob]
            i = vals.index(st[knob])
            if i == 0:
                continue
            better = vals[0] if knob == "prefix_cache" else vals[i - 1]
            short = self.estimate({**st, knob: better}).short()
            label = (self.variants[better].quant if knob == "quant" else better.label if knob == "draft"
                     else better)
            out[knob] = (Shortfall(label, short.name, short.total, short.available) if short is not None
                         else Shortfall(label))
        return out

"""Automatic sizing: choose how to load a model so that it fits, and say why.

``plan_for(model, hardware, choices)`` picks everything the user left on
Auto (quantization, context length, GPU layers, KV cache type, the draft
model, the prefix-cache budget) from the model's real shapes
(engine/sizing/spec.py) and the memory model (engine/sizing/memory.py). An
explicit choice is always kept; when it cannot fit, the plan says so and
what would fit instead.

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

``check_against_report`` compares a plan with what the backend actually
allocated; ``load_with_retry`` retries an out-of-memory load once with the
next smaller plan and says what changed.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, TypeVar

from ..errors import HearthError, ModelLoadError
from .hardware import MiB, Hardware, format_size, probe, simulated
from .memory import MARGIN, Breakdown, Config, estimate
from .spec import AUTO_QUANTS, KnownModel, ModelSpec, Resolved, resolve_spec

log = logging.getLogger("hearth.sizing")

CTX_COMFORT = 8192          # what a chat needs; above is luxury, below is loss
CTX_FLOOR = 2048            # below this a chat model is not useful
CTX_MAX_AUTO = 32768        # Auto never reserves more than this, whatever the model allows
PREFIX_CACHE_STEPS = (512 * MiB, 128 * MiB, 0)
KV_AUTO = ("f16", "q8_0")   # q4_0 costs visible quality; only by explicit choice
STATUS_FITS, STATUS_OFFLOAD, STATUS_NO = "fits", "fits with offload", "does not fit"

T = TypeVar("T")


@dataclass(slots=True, frozen=True)
class Choices:
    """What the user fixed; None means Auto."""

    quant: str | None = None
    n_ctx: int | None = None
    n_gpu_layers: int | None = None    # llama.cpp meaning; > n_layers puts the head on the GPU too
    kv_type: str | None = None
    draft: str | None = None           # None: Auto; "none"; or a path / catalogue id
    prefix_cache: int | None = None    # bytes
    n_batch: int = 512

    def explicit(self) -> frozenset[str]:
        names = {"quant": "quant", "n_ctx": "context", "n_gpu_layers": "gpu_layers", "kv_type": "kv",
                 "draft": "draft", "prefix_cache": "prefix_cache"}
        return frozenset(v for k, v in names.items() if getattr(self, k) is not None)


@dataclass(slots=True)
class Plan:
    """A chosen configuration, its memory breakdown, and the reasons."""

    spec: ModelSpec
    hardware: Hardware
    choices: Choices
    config: Config
    breakdown: Breakdown
    status: str
    reasons: dict[str, tuple[str, str]]          # knob -> (value shown, one-line reason)
    alternatives: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    variants: list[ModelSpec] = field(default_factory=list)
    known: KnownModel | None = None
    draft_source: str | None = None              # the draft's path or catalogue id

    @property
    def fits(self) -> bool:
        return self.status != STATUS_NO

    @property
    def n_ctx(self) -> int:
        return self.config.n_ctx

    @property
    def n_gpu_layers(self) -> int:
        return self.config.n_gpu_layers

    @property
    def kv_type(self) -> str:
        return self.config.kv_type

    @property
    def prefix_cache(self) -> int:
        return self.config.prefix_cache

    def engine_kwargs(self) -> dict[str, Any]:
        """Arguments for Engine.load that carry out this plan."""
        kw: dict[str, Any] = {"n_ctx": self.n_ctx, "cache_budget": self.prefix_cache}
        if self.spec.format == "hf":
            device, max_memory = self.hf_placement()
            kw.update(backend="hf", quant=self.spec.quant, device=device, max_memory=max_memory)
            return kw
        kw.update(n_gpu_layers=self.n_gpu_layers, kv_type=self.kv_type)
        if self.config.draft is not None and self.draft_source and os.path.exists(self.draft_source):
            kw["draft"] = self.draft_source
        return kw

    def load_ref(self, asked: str | os.PathLike[str] | None = None) -> str | os.PathLike[str] | None:
        """What to pass Engine.load as the model: the planned file or folder when
        it is local; for a catalogue model, the Hub id of the planned variant
        (``owner/repo:Q4_K_M`` picks that GGUF file); else what the user asked for."""
        if self.spec.source and os.path.exists(self.spec.source):
            return self.spec.source
        if self.known is not None:
            if self.spec.format == "gguf" and self.known.gguf_repo:
                return f"{self.known.gguf_repo}:{self.spec.quant}"
            if self.spec.format == "hf" and self.known.hf_repo:
                return self.known.hf_repo
        return asked

    def hf_placement(self) -> tuple[str, dict[Any, int] | None]:
        """transformers plans: the backend's ``device`` and accelerate's ``max_memory``.

        accelerate fills GPU 0, then GPU 1, ... up to max_memory with blocks in
        order, after holding back room for the largest block (offloaded blocks
        pass through the GPU). So each GPU gets the weights we planned for it
        plus that reserve, and accelerate lands on the planned split.
        """
        gpus = self.breakdown.gpus
        k = sum(p.layers for p in gpus)
        if k == 0:
            return "cpu", None
        if k >= self.spec.n_layers and len(gpus) == 1:
            return "gpu", None
        reserve = max(self.spec.layer_bytes, default=0)
        mm: dict[Any, int] = {i: p.weights + reserve for i, p in enumerate(gpus)}
        mm["cpu"] = max(0, self.breakdown.ram.available - self.breakdown.ram.overhead)
        return "auto", mm

    def summary(self) -> str:
        """One line, e.g. 'fits: Q4_K_M, context 32768, 28/28 layers on the GPU, KV f16'."""
        r = self.reasons
        return (f"{self.status}: {r['quant'][0]}, context {self.n_ctx}, {r['gpu_layers'][0]} on the GPU, "
                f"KV {self.kv_type}")

    def table(self) -> str:
        from .report import render_table

        return render_table(self)

    def to_dict(self) -> dict[str, Any]:
        from .report import plan_dict

        return plan_dict(self)


# -- the search ----------------------------------------------------------------------

def _ctx_target(spec: ModelSpec) -> int:
    return min(spec.n_ctx_train or CTX_COMFORT, CTX_MAX_AUTO)


def _halvings(top: int, bottom: int) -> list[int]:
    out, v = [], top
    while v > bottom:
        out.append(v)
        v //= 2
    return out + [bottom]


class _Search:
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
        target = ch.n_ctx or _ctx_target(spec0)
        comfort = min(CTX_COMFORT, target)
        self.comfort = comfort
        v: dict[str, list[Any]] = {}
        v["ctx_floor"] = [ch.n_ctx] if ch.n_ctx else sorted({comfort, *[c for c in (4096, CTX_FLOOR) if c < comfort]},
                                                           reverse=True)
        v["ctx_high"] = [ch.n_ctx] if ch.n_ctx else _halvings(target, comfort)
        max_ngl = spec0.n_layers + 1
        v["gpu_layers"] = ([min(ch.n_gpu_layers, max_ngl)] if ch.n_gpu_layers is not None and hw.gpus
                           else list(range(max_ngl, -1, -1)) if hw.gpus else [0])
        v["quant"] = list(range(len(variants)))
        # transformers keeps the KV cache in its compute dtype (see config()); not a choice there.
        if ch.kv_type and spec0.format == "hf":
            raise HearthError("the transformers backend keeps the KV cache in the model's compute dtype; "
                              "the KV cache type is a choice for GGUF models")
        v["kv"] = [ch.kv_type] if ch.kv_type else list(KV_AUTO if spec0.format == "gguf" else ("f16",))
        v["draft"] = [draft, None] if draft is not None and draft_auto else [draft]
        v["prefix_cache"] = [ch.prefix_cache] if ch.prefix_cache is not None else list(PREFIX_CACHE_STEPS)
        self.values, self.variants = v, variants
        self.state: dict[str, Any] = {k: vals[-1] for k, vals in v.items()}
        self.decided: set[str] = set()
        self.evaluations = 0

    def config(self, st: dict[str, Any]) -> Config:
        ctx = st["ctx_high"] if st["ctx_floor"] >= self.comfort else st["ctx_floor"]
        spec = self.variants[st["quant"]]
        kv = st["kv"]
        if spec.format == "hf":  # 16-bit with a block on the GPU, float32 on the CPU
            kv = "f16" if st["gpu_layers"] else "f32"
        return Config(spec, ctx, st["gpu_layers"], kv, self.ch.n_batch, st["draft"], st["prefix_cache"])

    def estimate(self, st: dict[str, Any]) -> Breakdown:
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
        if "gpu_layers" in self.decided:
            return self.estimate(st).fits
        return self.best_layers(st) is not None

    def run(self) -> dict[str, Any]:
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


# -- public API -------------------------------------------------------------------------

def plan_for(model: str | os.PathLike[str] | None | Resolved, hardware: Hardware | None = None,
             choices: Choices | None = None, *, _alternatives_too: bool = True) -> Plan:
    """Plan how to load ``model`` (a path, folder, catalogue id or hub id; None =
    the bundled model) on ``hardware`` (None = probe this machine)."""
    ch = choices or Choices()
    res = model if isinstance(model, Resolved) else resolve_spec(model)
    variants = _pick_variants(res, ch)
    hw = hardware or probe(allow_torch=variants[0].format == "hf")
    draft, draft_src, draft_note = _pick_draft(res, variants[0], ch)
    search = _Search(variants, hw, ch, draft, draft_auto=ch.draft is None)
    state = search.run()
    cfg = search.config(state)
    bd = estimate(cfg, hw)
    if not bd.fits:
        status = STATUS_NO
    elif hw.gpus and not cfg.all_on_gpu:
        status = STATUS_OFFLOAD
    else:
        status = STATUS_FITS
    plan = Plan(cfg.spec, hw, ch, cfg, bd, status, {}, variants=variants, known=res.known,
                draft_source=draft_src if cfg.draft is not None else None)
    from .report import explain

    plan.reasons = explain(plan, search, state, draft_note)
    _add_notes(plan)
    if status == STATUS_NO and _alternatives_too:
        plan.alternatives = _alternatives(res, hw, ch)
    return plan


def _pick_variants(res: Resolved, ch: Choices) -> list[ModelSpec]:
    """The variants the search may choose from, best quality first (the search
    treats the last one as the cheapest)."""
    vs = sorted(res.variants, key=lambda s: (-s.weight_bytes, s.format != "gguf"))
    if ch.quant:
        want = ch.quant.lower()
        hit = [v for v in vs if v.quant.lower() == want]
        if not hit:
            have = ", ".join(sorted({v.quant for v in vs}))
            raise HearthError(f"no {ch.quant} variant of this model (available: {have})")
        return hit[:1]
    if res.explicit_quant:
        return vs[:1]
    # A bare catalogue id plans the GGUF files: llama.cpp is Hearth's main path
    # and the fast one on CPUs. Ask for --quant int4 etc. to plan transformers.
    gguf = [v for v in vs if v.format == "gguf"]
    vs = gguf or vs
    auto = [v for v in vs if v.quant in AUTO_QUANTS]
    return auto or vs


def _pick_draft(res: Resolved, target: ModelSpec, ch: Choices) -> tuple[ModelSpec | None, str | None, str]:
    """The draft model to plan for, its source, and a note when there is none."""
    if ch.draft is not None and ch.draft.lower() == "none":
        return None, None, "off (your choice)"
    if ch.draft is not None:
        r = resolve_spec(ch.draft)
        d = min((v for v in r.variants if v.format == target.format), key=lambda v: v.weight_bytes, default=None)
        if d is None:
            raise HearthError(f"{ch.draft} has no {target.format} variant to draft with")
        return d, str(ch.draft), ""
    if res.known is not None:
        if not res.known.draft:
            return None, None, "no smaller model of this family is known"
        from .spec import known_models

        m = next((k for k in known_models() if k.id == res.known.draft), None)
        # GGUF drafts are Q4_K_M (a draft's quality matters little, its speed a lot);
        # a transformers draft loads at the target's quantization.
        cands = [v for v in (m.variants if m else []) if v.format == target.format]
        want = "Q4_K_M" if target.format == "gguf" else target.quant
        d = next((v for v in cands if v.quant == want), None) or min(cands, key=lambda v: v.weight_bytes, default=None)
        return (d, res.known.draft, "") if d else (None, None, "no draft variant in this format")
    if target.format == "gguf" and os.path.isfile(target.source):
        try:
            from ..engine import find_draft_for
            from ..models.gguf import model_info
            from .spec import spec_from_gguf

            found = find_draft_for(model_info(target.source))
        except HearthError as e:
            return None, None, f"could not look for a draft ({e})"
        if found is not None:
            return spec_from_gguf(found), str(found), ""
    return None, None, "no compatible draft model among the local models"


def _add_notes(plan: Plan) -> None:
    s, hw = plan.spec, plan.hardware
    if plan.choices.n_ctx and s.n_ctx_train and plan.choices.n_ctx > s.n_ctx_train:
        plan.notes.append(f"context {plan.choices.n_ctx} is beyond what the model was trained on "
                          f"({s.n_ctx_train}); answers may degrade past that point")
    if s.format == "hf" and s.quant in ("int8", "int4") and not hw.gpus:
        plan.notes.append("bitsandbytes int8/int4 on the CPU is slow; a GGUF file runs much faster there")
    if s.format == "hf" and s.quant in ("int8", "int4") and hw.gpus and not plan.config.all_on_gpu:
        plan.notes.append("bitsandbytes keeps blocks offloaded to the CPU in float32 (4 bytes per weight)")
    plan.notes.extend(hw.notes)


def _alternatives(res: Resolved, hw: Hardware, ch: Choices) -> list[str]:
    """When a plan does not fit: what would, one explicit choice relaxed at a time,
    then every choice on Auto, then (for catalogue models) a smaller known model."""
    out: list[str] = []
    fields = {"quant": "quantization", "n_ctx": "context", "n_gpu_layers": "GPU layers",
              "kv_type": "KV cache type", "draft": "draft model", "prefix_cache": "prefix cache"}
    for f, label in fields.items():
        if getattr(ch, f) is None:
            continue
        try:
            p = plan_for(res, hw, replace(ch, **{f: None}), _alternatives_too=False)
        except HearthError:
            continue
        if p.fits:
            out.append(f"with {label} on Auto: {p.summary()}")
    if ch.explicit() and not out:
        try:
            p = plan_for(res, hw, Choices(n_batch=ch.n_batch), _alternatives_too=False)
            if p.fits:
                out.append(f"with every choice on Auto: {p.summary()}")
        except HearthError:
            pass
    if not out:
        smallest = min(res.variants, key=lambda v: v.weight_bytes)
        out.append(f"even {smallest.quant} with a {CTX_FLOOR}-token context needs more memory than this "
                   "machine has free; close other programs or choose a smaller model")
        if res.known is not None:
            out.extend(_smaller_known(res.known, hw))
    return out


def _smaller_known(current: KnownModel, hw: Hardware) -> list[str]:
    from .spec import known_models

    best: tuple[int, str] | None = None
    for m in known_models():
        size = min(v.weight_bytes for v in m.variants)
        if m.id == current.id or size >= min(v.weight_bytes for v in current.variants):
            continue
        p = plan_for(Resolved(m.variants, "catalogue", known=m), hw, Choices(draft="none"), _alternatives_too=False)
        if p.fits and (best is None or size > best[0]):
            best = (size, f"the largest known model that fits: {m.id} ({p.summary()})")
    return [best[1]] if best else []


# -- checked against reality ---------------------------------------------------------

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


def compare(breakdown: Breakdown, report: dict[str, int]) -> dict[str, Any]:
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


def check_against_report(plan: Plan, report: dict[str, int], *, threshold: float = MARGIN) -> dict[str, Any]:
    """Compare a plan with what was really allocated; warn when off by more than the margin."""
    result = compare(plan.breakdown, report)
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
    from .report import knob_values

    a, b = knob_values(old), knob_values(new)
    diffs = [f"{k} {a[k]} -> {b[k]}" for k in a if a[k] != b[k]]
    return ", ".join(diffs) or "nothing"


def load_with_retry(load: Callable[[Plan], T], plan: Plan) -> tuple[T, Plan, str | None]:
    """``load(plan)``; if it runs out of memory, retry once with the next
    smaller plan. Returns (result, the plan used, a message for the user or None)."""
    try:
        return load(plan), plan, None
    except HearthError as e:
        if not is_out_of_memory(e):
            raise
        smaller = smaller_plan(plan, e)
        if smaller is None or not smaller.fits:
            fixed = ", ".join(sorted(plan.choices.explicit()))
            why = f"with the settings you fixed ({fixed}) there is no smaller plan" if fixed else \
                "there is no smaller plan that fits"
            raise ModelLoadError(f"{e}. {why}; choose a smaller context or quantization, "
                                 "or close other programs") from e
        msg = f"Out of memory with the first plan; loaded with {describe_change(plan, smaller)} instead."
        log.warning("%s (first error: %s)", msg, e)
        return load(smaller), smaller, msg


def load_engine(model: str | os.PathLike[str] | None = None, *, hardware: Hardware | None = None,
                choices: Choices | None = None, **engine_kwargs: Any):
    """Plan, load (retrying once on out-of-memory) and check against reality.

    Returns (engine, plan, messages). Raises ModelLoadError when the plan
    does not fit, with what would fit instead.
    """
    from ..engine import Engine

    plan = plan_for(model, hardware, choices)
    if not plan.fits:
        raise ModelLoadError(f"{plan.spec.label} does not fit in memory. " + " ".join(plan.alternatives))

    def load(p: Plan):
        return Engine.load(p.load_ref(model), **{**p.engine_kwargs(), **engine_kwargs})

    engine, used, msg = load_with_retry(load, plan)
    messages = [msg] if msg else []
    check = check_against_report(used, engine.backend.memory_report())
    if not check["within_margin"]:
        messages.append(f"memory use differs from the plan by up to {check['max_rel_error']:.0%}")
    return engine, used, messages


# -- CLI ----------------------------------------------------------------------------

def cli_plan(args) -> int:
    """``python -m engine plan``: print the plan (or --json). Exit 0 when it
    fits (with or without offload), 1 when it does not."""
    try:
        hw = simulated(args.gpu, args.ram) if (args.gpu or args.ram) else None
    except ValueError as e:
        raise HearthError(str(e)) from None
    plan = plan_for(args.model, hw, Choices(quant=args.quant, n_ctx=args.ctx, draft=args.draft))
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
    else:
        print(plan.table())
    return 0 if plan.fits else 1

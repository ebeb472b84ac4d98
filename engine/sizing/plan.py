"""The plan: ``plan_for(model, hardware, choices)`` and the ``Plan`` it returns.

``plan_for`` picks everything the user left on Auto (quantization, context
length, GPU layers, KV cache type, the draft model, the prefix-cache budget)
from the model's real shapes (shape.py) and the memory model (memory.py), in
the give-up order of search.py. An explicit choice is always kept; when it
cannot fit, the plan says so and what would fit instead.

A Plan is plain data: the chosen configuration, its breakdown, and what the
search gave up for each knob (``shortfalls``). report.py renders it;
reality.py checks it against what the backend allocated.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from ..config import HF_QUANTS, EngineConfig
from ..errors import HearthError
from .hardware import Hardware, probe
from .load_spec import AUTO, chosen
from .memory import Breakdown, Config, estimate
from .search import CTX_FLOOR, Choices, Search, Shortfall
from .resolve import KnownModel, Resolved, known_models, resolve_spec
from .shape import AUTO_QUANTS, ModelSpec, spec_from_gguf

__all__ = ["STATUS_FITS", "STATUS_NO", "STATUS_OFFLOAD", "Choices", "Plan", "plan_for"]

STATUS_FITS, STATUS_OFFLOAD, STATUS_NO = "fits", "fits with offload", "does not fit"


@dataclass(slots=True)
class Plan:
    """A chosen configuration, its memory breakdown, and what each knob gave up."""

    spec: ModelSpec
    hardware: Hardware
    choices: Choices
    config: Config
    breakdown: Breakdown
    status: str
    shortfalls: dict[str, Shortfall]             # search knob -> the better value it gave up, and why
    alternatives: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    variants: list[ModelSpec] = field(default_factory=list)
    known: KnownModel | None = None
    draft_source: str | None = None              # the draft's path or catalogue id
    draft_note: str = ""                         # why there is no draft to plan for, when there is none

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

    def config_values(self) -> dict[str, Any]:
        """What this plan decides of an EngineConfig: the fields ``to_config`` sets."""
        kw: dict[str, Any] = {"n_ctx": self.n_ctx, "cache_budget": self.prefix_cache}
        if self.spec.format == "hf":
            device, max_memory = self.hf_placement()
            # A pre-quantized checkpoint (a GPTQ or AWQ label) loads as stored. Layers are placed by
            # device and max_memory here; llama.cpp's layer count and KV type keep their defaults.
            quant = self.spec.quant if self.spec.quant in HF_QUANTS else "none"
            kw.update(backend="hf", quant=quant, device=device, max_memory=max_memory, n_gpu_layers=0,
                      kv_type="f16")
            return kw
        kw.update(n_gpu_layers=self.n_gpu_layers, kv_type=self.kv_type, tensor_split=self.tensor_split)
        if self.config.draft is not None and self.draft_source and os.path.exists(self.draft_source):
            kw["draft"] = self.draft_source
        return kw

    @property
    def tensor_split(self) -> tuple[float, ...] | None:
        """llama.cpp's ``tensor_split`` that places the layers as planned, for a split over several
        devices (None: one device or none, where llama.cpp needs none). The plan's positions per device
        are the split itself: llama.cpp cuts at their cumulative shares, as the planner does."""
        gpus = self.breakdown.gpus
        if self.spec.format != "gguf" or len(gpus) < 2 or not any(p.positions for p in gpus):
            return None
        return tuple(float(p.positions) for p in gpus)

    def to_config(self, base: EngineConfig | None = None) -> EngineConfig:
        """This plan carried out: ``base`` (what the plan does not decide: threads, exactness,
        the caches' folder...; default: the planned model with every other field at its default)
        with what the plan decided. The one way a plan becomes an EngineConfig."""
        if base is None:
            base = EngineConfig(model=self.load_ref())
        return replace(base, **self.config_values())

    def load_ref(self, asked: str | os.PathLike[str] | None = None) -> str | os.PathLike[str] | None:
        """The model of this plan's EngineConfig: the planned file or folder when
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

    @property
    def quant_text(self) -> str:
        """The quantization as people read it: 'Q4_K_M', or 'int4 (transformers)'."""
        return self.spec.quant + ("" if self.spec.format == "gguf" else " (transformers)")

    @property
    def gpu_layers_text(self) -> str:
        """Blocks on the GPU: 'none' (no GPU), '20/28', or '19/28 + head' (llama.cpp offloads GGUF's
        output head first: n_gpu_layers = k is the head and k - 1 blocks)."""
        n, k = self.spec.n_layers, self.n_gpu_layers
        if not self.hardware.gpus:
            return "none"
        if self.spec.format == "gguf" and k > 0:
            return f"{min(k - 1, n)}/{n} + head"
        return f"{min(k, n)}/{n}"

    def summary(self) -> str:
        """One line, e.g. 'fits: Q4_K_M, context 32768, 28/28 layers on the GPU, KV f16'."""
        return (f"{self.status}: {self.quant_text}, context {self.n_ctx}, {self.gpu_layers_text} on the GPU, "
                f"KV {self.kv_type}")


def plan_for(model: str | os.PathLike[str] | None | Resolved, hardware: Hardware | None = None,
             choices: Choices | None = None, *, _alternatives_too: bool = True) -> Plan:
    """Plan how to load ``model`` (a path, folder, catalogue id or hub id; None =
    the bundled model) on ``hardware`` (None = probe this machine)."""
    ch = choices or Choices()
    res = model if isinstance(model, Resolved) else resolve_spec(model)
    variants = _pick_variants(res, ch)
    hw = hardware or probe(allow_torch=variants[0].format == "hf")
    draft, draft_src, draft_note = _pick_draft(res, variants[0], ch)
    search = Search(variants, hw, ch, draft, draft_auto=ch.draft is AUTO)
    state = search.run()
    cfg = search.config(state)
    bd = estimate(cfg, hw)
    if not bd.fits:
        status = STATUS_NO
    elif hw.gpus and not cfg.all_on_gpu:
        status = STATUS_OFFLOAD
    else:
        status = STATUS_FITS
    plan = Plan(cfg.spec, hw, ch, cfg, bd, status, search.shortfalls(state), variants=variants, known=res.known,
                draft_source=draft_src if cfg.draft is not None else None, draft_note=draft_note)
    _add_notes(plan)
    if status == STATUS_NO and _alternatives_too:
        plan.alternatives = _alternatives(res, hw, ch)
    return plan


def _pick_variants(res: Resolved, ch: Choices) -> list[ModelSpec]:
    """The variants the search may choose from, best quality first (the search
    treats the last one as the cheapest)."""
    vs = sorted(res.variants, key=lambda s: (-s.weight_bytes, s.format != "gguf"))
    if ch.quant is not AUTO:
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
    if ch.draft is not AUTO and ch.draft.lower() == "none":
        return None, None, "off (your choice)"
    if ch.draft is not AUTO:
        r = resolve_spec(ch.draft)
        d = min((v for v in r.variants if v.format == target.format), key=lambda v: v.weight_bytes, default=None)
        if d is None:
            raise HearthError(f"{ch.draft} has no {target.format} variant to draft with")
        return d, str(ch.draft), ""
    if res.known is not None:
        if not res.known.draft:
            return None, None, "no smaller model of this family is known"
        m = next((k for k in known_models() if k.id == res.known.draft), None)
        # GGUF drafts are Q4_K_M (a draft's quality matters little, its speed a lot);
        # a transformers draft loads at the target's quantization.
        cands = [v for v in (m.variants if m else []) if v.format == target.format]
        want = "Q4_K_M" if target.format == "gguf" else target.quant
        d = next((v for v in cands if v.quant == want), None) or min(cands, key=lambda v: v.weight_bytes, default=None)
        return (d, res.known.draft, "") if d else (None, None, "no draft variant in this format")
    if target.format == "gguf" and os.path.isfile(target.source):
        try:
            from .drafts import draft_candidates, find_draft_for
            from ..models.gguf import model_info

            # The target's vocabulary (a decode of every token) only when some file could draft for it.
            candidates = draft_candidates(target.source, target.weight_bytes)
            found = find_draft_for(model_info(target.source).vocab(), candidates) if candidates else None
        except HearthError as e:
            return None, None, f"could not look for a draft ({e})"
        if found is not None:
            return spec_from_gguf(found), str(found), ""
    return None, None, "no compatible draft model among the local models"


def _add_notes(plan: Plan) -> None:
    s, hw = plan.spec, plan.hardware
    asked = chosen(plan.choices.n_ctx)
    if asked and s.n_ctx_train and asked > s.n_ctx_train:
        plan.notes.append(f"context {asked} is beyond what the model was trained on "
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
        if getattr(ch, f) is AUTO:
            continue
        try:
            auto: dict[str, Any] = {f: AUTO}
            p = plan_for(res, hw, replace(ch, **auto), _alternatives_too=False)
        except HearthError:
            continue
        if p.fits:
            out.append(f"with {label} on Auto: {p.summary()}")
    if ch.explicit() and not out:
        try:
            auto_all = Choices(n_batch=ch.n_batch, parallel=ch.parallel, exactness=ch.exactness)
            p = plan_for(res, hw, auto_all, _alternatives_too=False)
            if p.fits:
                out.append(f"with every choice on Auto: {p.summary()}")
        except HearthError:
            pass
    if not out:
        smallest = min(res.variants, key=lambda v: v.weight_bytes)
        out.append(f"even {smallest.quant} with a {CTX_FLOOR}-token context needs more memory than this "
                   "machine has free; close other programs or choose a smaller model")
        if res.known is not None:
            out.extend(_smaller_known(res.known, hw, ch))
    return out


def _smaller_known(current: KnownModel, hw: Hardware, asked: Choices) -> list[str]:
    best: tuple[int, str] | None = None
    for m in known_models():
        size = min(v.weight_bytes for v in m.variants)
        if m.id == current.id or size >= min(v.weight_bytes for v in current.variants):
            continue
        ch = Choices(draft="none", parallel=asked.parallel, exactness=asked.exactness)
        p = plan_for(Resolved(m.variants, "catalogue", known=m), hw, ch, _alternatives_too=False)
        if p.fits and (best is None or size > best[0]):
            best = (size, f"the largest known model that fits: {m.id} ({p.summary()})")
    return [best[1]] if best else []


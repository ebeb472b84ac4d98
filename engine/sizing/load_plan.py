"""The one shape change of a load: a LoadSpec (what the user chose) -> the frozen EngineConfig.

:func:`plan_load` plans the spec on a machine (plan.py's search fills in every AUTO) and
carries the plan out (:func:`carry_out`). A choice the user fixed goes to the planner as a
choice and stays as chosen, even when the plan says it does not fit (the caller said so
before the load). The window's load, its settings preview, ``engine serve``/``chat``/``plan``,
the library pool and the benchmarks all come through here, so the plan shown is the plan loaded.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..config import EngineConfig
from ..kv.disk_store import DEFAULT_DISK_BUDGET
from ..models.catalogue import ModelRef
from .hardware import Hardware, probe
from .load_spec import AUTO, BUNDLED, LoadSpec, chosen
from .plan import Choices, Plan, plan_for

ALL_LAYERS = 1 << 20       # "all": the planner clamps it to every block plus the output head
PREFIX_STORE = "prefix-cache"


def prefix_store_dir(data_dir: Path) -> Path:
    """The disk prefix store in a data folder: system-prompt KV snapshots that survive a restart."""
    return Path(data_dir) / PREFIX_STORE


def plan_load(spec: LoadSpec, hardware: Hardware | None, *, ref: ModelRef | None = None,
              backend: str | None = None, data_dir: Path | None = None, n_threads: int | None = None,
              threads_poll: int | None = None) -> tuple[EngineConfig, Plan | None]:
    """The EngineConfig that carries out ``spec`` on ``hardware``, and the plan behind it (None
    where no planner covers the load: a GGUF file on transformers).

    ``ref``: the model resolved (a Hub model once downloaded; default: the spec's model, planned
    by its name). ``backend``: the runtime once the model is known (default: the spec's, else the
    model's type). ``hardware``: the machine as the backend sees it (engine.loading's ``machine``;
    None: probed here). ``data_dir``: the disk prefix store's data folder (None: no store).
    ``n_threads``/``threads_poll``: what the spec's AUTO threads are (None: the backend's own).
    Raises HearthError when the model cannot be planned (unreadable, not downloaded yet)."""
    plan = plan_spec(spec, hardware, ref)
    if ref is None:
        ref = spec.model_ref()
    if backend is None:
        from ..models.catalogue import default_backend

        backend = chosen(spec.backend) or default_backend(ref)
    return carry_out(plan, spec, ref, backend, data_dir=data_dir, n_threads=n_threads,
                     threads_poll=threads_poll), plan


def plan_spec(spec: LoadSpec, hardware: Hardware | None, ref: ModelRef | None = None) -> Plan | None:
    """The memory plan half of :func:`plan_load` (the settings dialog's preview, the retry's first plan):
    the plan for ``spec`` on ``hardware`` (None: probed here), of ``ref``'s file when given, else of the
    spec's model by name; None where no planner covers the load."""
    fmt = spec.plan_format
    if fmt is None:
        return None
    target = str(ref.path) if ref is not None else None if (spec.model or BUNDLED) == BUNDLED else spec.model
    return plan_for(target, hardware or probe(allow_torch=fmt == "hf"), choices(spec, fmt))


def choices(spec: LoadSpec, fmt: str) -> Choices:
    """The spec's fixed choices as the search reads them (AUTO stays AUTO) for a ``fmt`` ("gguf" or "hf")
    plan: "all" GPU layers as llama.cpp's count, no quantization choice for a GGUF (its file carries one),
    no model draft on transformers (its drafts come from the catalogue only; Hearth drafts with n-gram)."""
    gl = spec.gpu_layers
    return Choices(quant=AUTO if fmt == "gguf" else spec.quant, n_ctx=spec.context,
                   n_gpu_layers=ALL_LAYERS if gl == "all" else gl, kv_type=spec.kv_type,
                   draft="none" if fmt == "hf" else spec.draft, prefix_cache=spec.prefix_cache,
                   n_batch=spec.n_batch, parallel=spec.server_parallel, exactness=spec.exactness)


def carry_out(plan: Plan | None, spec: LoadSpec, ref: ModelRef, backend: str, *, data_dir: Path | None = None,
              n_threads: int | None = None, threads_poll: int | None = None) -> EngineConfig:
    """``plan`` carried out for ``spec`` on the resolved ``ref`` and ``backend``: the spec as chosen,
    then the plan's values (``Plan.to_config``; they hold every fixed choice). The out-of-memory retry
    calls this again with a smaller plan. Threads: the spec's, else ``n_threads``/``threads_poll``."""
    draft = chosen(spec.draft, "auto")
    base = EngineConfig(
        model=ref, backend=backend, n_threads=chosen(spec.n_threads, n_threads),
        threads_poll=chosen(spec.threads_poll, threads_poll), exactness=spec.exactness,
        mmproj="auto" if spec.mmproj is AUTO or backend == "hf" else spec.mmproj,
        n_ctx=chosen(spec.context), draft=draft,
        n_gpu_layers=-1 if spec.gpu_layers == "all" else 0 if spec.gpu_layers is AUTO else spec.gpu_layers,
        kv_type=chosen(spec.kv_type, "f16"),
        quant="none" if backend != "hf" or spec.quant is AUTO else spec.quant,
        disk_cache=prefix_store_dir(data_dir) if data_dir is not None else None,
        disk_cache_bytes=DEFAULT_DISK_BUDGET)
    if plan is None:
        return base
    if draft != "none" and plan.config.draft is None and "draft" in plan.shortfalls:
        draft = "ngram"  # the model draft was given up for memory; n-gram lookup needs none
    # The planned draft file is the one the engine's "auto" finds, plus n-gram: the spec's choice stays.
    return replace(plan.to_config(base), draft=draft)

"""EngineConfig: what one load of the engine is, as one frozen value.

Every caller opens an engine from a config (``Engine.open(config)``): the window's
planned load, ``engine serve``/``chat``, the benchmarks, the pool and the tests. What
the user chose (a ``LoadSpec``, engine/sizing/load_spec.py) becomes a config in one
place, ``plan_load`` (engine/sizing/load_plan.py): the spec as chosen is the base,
and ``Plan.to_config`` (engine/sizing/plan.py) fills in what the plan decided.
Here "all layers" is llama.cpp's -1 and an unset context None: the runtime's words.

Fields are grouped by what they decide: the model and its runtime, where its layers
go, the context and KV cache, the threads, exactness, speculative decoding, the
vision projector, and the prefix caches. Each value is checked here, so a bad one
fails with a clear message before any file is read.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from .errors import HearthError
from .kv.disk_store import DEFAULT_DISK_BUDGET
from .kv.prefix_cache import DEFAULT_BUDGET
from .prompt.view import check_policy
from .models.catalogue import BACKENDS, ModelRef, resolve

# "exact": kernels whose logits do not depend on batching (cache and speculation change nothing);
# "fast": llama.cpp's faster CPU kernels (repack buffers, flash attention, tinyBLAS), under which cached and
# speculative output may differ slightly from plain decoding.
EXACTNESS = ("exact", "fast")
# The profile a load gets when it names none: "fast", llama.cpp's own defaults (what LM Studio and
# Ollama run; `bench speed` measures both against llama-bench). HEARTH_EXACTNESS=exact changes it.
DEFAULT_EXACTNESS = "fast"


def default_exactness() -> str:
    """The exactness profile of a load that names none (HEARTH_EXACTNESS, else DEFAULT_EXACTNESS)."""
    v = os.environ.get("HEARTH_EXACTNESS") or DEFAULT_EXACTNESS
    if v not in EXACTNESS:
        raise HearthError(f"HEARTH_EXACTNESS={v!r} is not an exactness profile; choose exact or fast")
    return v
HF_QUANTS = ("none", "int8", "int4")
HF_DEVICES = ("auto", "cpu", "gpu")
DRAFT_MODES = ("none", "ngram", "model", "auto")


@dataclass(slots=True, frozen=True)
class EngineConfig:
    """One load: a model and every choice its runtime needs.

    ``model``: a ModelRef, or what a user types (None or "bundled" for the bundled
    model, a .gguf path, a transformers folder, a Hub id), resolved when the config
    is made. A Hub id is fetched by ``Engine.open``.
    """

    model: ModelRef | str | os.PathLike[str] | None = None
    # The runtime: "llama_cpp" or "hf"; None: the model's kind decides (GGUF files on llama.cpp).
    backend: str | None = None
    # Where the layers go. llama.cpp: how many blocks on the GPU (-1: all). transformers: the
    # bitsandbytes quantization, the device ("auto", "cpu", "gpu") and accelerate's max_memory.
    n_gpu_layers: int = 0
    # llama.cpp over several devices: each device's share of the offloaded layers, in llama.cpp's order
    # (RPC workers first, then this machine's GPUs); None: shares by free memory, as llama.cpp does.
    tensor_split: tuple[float, ...] | None = None
    quant: str = "none"
    device: str = "auto"
    max_memory: Mapping[Any, int] | None = None
    # The context (None: the model's training context, at most loading's default) and the KV cache type.
    n_ctx: int | None = None
    kv_type: str = "f16"
    # CPU threads (None: the backend's default) and, on llama.cpp, the poll level of Hearth's own
    # thread pool (0-100; None: llama.cpp's threads).
    n_threads: int | None = None
    threads_poll: int | None = None
    exactness: str = field(default_factory=default_exactness)
    # Speculative decoding: "none", "ngram", "model", "auto" or a draft model's path; ``draft_k``
    # fixes the draft length instead of adapting it.
    draft: str | os.PathLike[str] | None = None
    draft_k: int | None = None
    # A GGUF's vision projector: "auto" (the one made for it beside it), "none" or a path.
    mmproj: str | None = "auto"
    # The in-memory prefix cache's budget in bytes (0: off) and the disk store of system-prompt
    # snapshots (a folder; None: none), capped at ``disk_cache_bytes``.
    cache_budget: int = DEFAULT_BUDGET
    disk_cache: str | os.PathLike[str] | None = None
    disk_cache_bytes: int | None = DEFAULT_DISK_BUDGET
    # What a transformers folder may bring: pickled weights, its own Python code. Off by default.
    allow_pickle: bool = False
    allow_remote_code: bool = False
    # A conversation longer than the context, where a request names no policy (engine/prompt/view.py):
    # "stop", "drop_oldest", "shift" or "compact".
    context_policy: str = "drop_oldest"

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelRef):
            object.__setattr__(self, "model", resolve(self.model))
        if self.backend is not None and self.backend not in BACKENDS:
            raise HearthError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if isinstance(self.n_gpu_layers, bool) or not isinstance(self.n_gpu_layers, int) or self.n_gpu_layers < -1:
            raise HearthError(f"n_gpu_layers must be a whole number >= -1 (-1: all), got {self.n_gpu_layers!r}")
        if self.tensor_split is not None:
            split = tuple(self.tensor_split)
            if not split or any(not isinstance(x, (int, float)) or x < 0 for x in split) or not sum(split):
                raise HearthError(f"tensor_split must be shares >= 0, not all zero, got {self.tensor_split!r}")
            object.__setattr__(self, "tensor_split", tuple(float(x) for x in split))
        if self.quant not in HF_QUANTS:
            raise HearthError(f"unknown quantization {self.quant!r}; choose one of {', '.join(HF_QUANTS)}")
        if self.n_ctx is not None and (not isinstance(self.n_ctx, int) or self.n_ctx < 1):
            raise HearthError(f"n_ctx must be a whole number >= 1, got {self.n_ctx!r}")
        if self.n_threads is not None and (not isinstance(self.n_threads, int) or self.n_threads < 1):
            raise HearthError(f"n_threads must be a whole number >= 1, got {self.n_threads!r}")
        if self.exactness not in EXACTNESS:
            raise HearthError(f"unknown exactness profile {self.exactness!r}; choose exact or fast")
        if self.draft_k is not None and (not isinstance(self.draft_k, int) or self.draft_k < 1):
            raise HearthError(f"draft_k must be a whole number >= 1, got {self.draft_k!r}")
        if not isinstance(self.cache_budget, int) or self.cache_budget < 0:
            raise HearthError(f"cache_budget must be a whole number of bytes >= 0, got {self.cache_budget!r}")
        if self.max_memory is not None:
            object.__setattr__(self, "max_memory", dict(self.max_memory))
        check_policy(self.context_policy)

    @property
    def ref(self) -> ModelRef:
        """The model, resolved (``model`` is always a ModelRef once the config exists)."""
        assert isinstance(self.model, ModelRef)
        return self.model

    @property
    def draft_mode(self) -> str:
        """The speculation mode: one of DRAFT_MODES, "model" for a draft file."""
        d = "none" if self.draft is None else str(self.draft)
        return d if d in DRAFT_MODES else "model"

    @property
    def disk_cache_dir(self) -> Path | None:
        """The disk prefix store's folder, when it is on (a prefix cache budget of 0 turns it off too)."""
        return Path(self.disk_cache) if self.disk_cache is not None and self.cache_budget > 0 else None

    def with_model(self, model: ModelRef | str | os.PathLike[str] | None) -> "EngineConfig":
        """The same choices for another model (a Hub model once fetched, a planned variant)."""
        return replace(self, model=model if isinstance(model, ModelRef) else resolve(model))

"""Opening a backend for an EngineConfig.

``Engine.open`` is the public entry; this module holds the choice of backend
and the optional-package message, so the engine itself stays about requests.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .base import Backend
from ..errors import HearthError, ModelFileError
from ..models.catalogue import BACKENDS, default_backend

if TYPE_CHECKING:
    from ..config import EngineConfig

DEFAULT_CTX = 8192


def open_backend(config: EngineConfig) -> tuple[Backend, Callable[[Path], str]]:
    """The backend for ``config``'s local model (a Hub id is fetched before this), and a
    function giving the model's SHA-256 (memoised under a folder) for the disk cache key.
    ``exactness`` and ``threads_poll`` are llama.cpp settings (transformers has neither). ``mmproj``: a
    vision projector to load beside a GGUF; "auto" finds the one made for it in its folder, if any."""
    ref, c = config.ref, config
    mmproj: str | os.PathLike[str] | None = c.mmproj
    kind = c.backend or default_backend(ref)
    if kind == "hf" and mmproj not in (None, "auto", "none"):
        raise HearthError("images need a GGUF model with its projector (mmproj); the transformers "
                          "backend reads text only for now")
    if kind == "hf":
        hf = import_hf()  # torch + transformers: only when this backend is chosen
        be = hf.load(ref, n_ctx=c.n_ctx, quant=c.quant, device=c.device,
                     max_memory=dict(c.max_memory) if c.max_memory is not None else None,
                     n_threads=c.n_threads, allow_pickle=c.allow_pickle, allow_remote_code=c.allow_remote_code)
        return be, lambda root: hf.source_sha256(ref.path, memo_dir=root)
    if kind == "llama_cpp":
        if ref.kind != "gguf":
            raise HearthError(f"{ref.label} is a transformers folder; the llama.cpp backend needs a "
                              ".gguf file, so choose the transformers (hf) backend")
        if c.quant != "none":
            raise HearthError("int8/int4 are transformers-backend choices; a GGUF file carries its "
                              "own quantization (pick another GGUF file to change it)")
        from .llama.backend import LlamaCppBackend  # native library: load only when asked
        from ..models.digest import file_sha256
        from ..models.gguf import model_info

        info = model_info(ref.path)
        if info.architecture == "clip":
            raise ModelFileError(f"{ref.path.name} is a vision projector (mmproj), not a model: choose the "
                                 "model's GGUF, and this file as its projector")
        if mmproj == "auto":
            from ..models.projector import find_projector

            found = find_projector(ref.path, info.n_embd)
            mmproj = found
        elif mmproj == "none":
            mmproj = None
        n_ctx = c.n_ctx if c.n_ctx is not None else min(info.n_ctx_train or DEFAULT_CTX, DEFAULT_CTX)
        lb = LlamaCppBackend(ref.path, n_ctx=n_ctx, n_threads=c.n_threads,
                             n_gpu_layers=c.n_gpu_layers, tensor_split=c.tensor_split, kv_type=c.kv_type, info=info,
                             exactness=c.exactness, threads_poll=c.threads_poll, mmproj=mmproj)
        return lb, lambda root: file_sha256(ref.path, memo_dir=root)
    raise HearthError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")


def import_hf():
    """The transformers backend package, or a clear message when the optional
    packages are not installed (the app's default set-up is GGUF-only)."""
    try:
        from . import hf
    except ImportError as e:
        import sys

        how = ("this Hearth bundle is the lite flavour; install the full bundle for transformers models"
               if getattr(sys, "frozen", False) else
               "run `python3 scripts/setup.py --hf` to add torch, transformers and bitsandbytes")
        raise HearthError(f"the transformers backend is not installed ({e.name or e}); {how}") from None
    return hf

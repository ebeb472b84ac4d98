"""Opening a backend for a model reference.

``Engine.load`` is the public entry; this module holds the choice of backend
and the optional-package message, so the engine itself stays about requests.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..backends.base import Backend
from ..errors import HearthError, ModelFileError
from ..models.catalogue import BACKENDS, ModelRef, default_backend

DEFAULT_CTX = 8192


def open_backend(ref: ModelRef, *, backend: str | None, n_ctx: int | None, n_threads: int | None,
                 n_gpu_layers: int, kv_type: str, quant: str, device: str, max_memory: dict | None,
                 allow_pickle: bool, allow_remote_code: bool,
                 repack: bool, exactness: str = "exact",
                 threads_poll: int | None = None,
                 mmproj: str | os.PathLike[str] | None = None) -> tuple[Backend, Callable[[Path], str]]:
    """The backend for a local ``ref`` (a Hub id is fetched before this), and a
    function giving the model's SHA-256 (memoised under a folder) for the disk cache key.
    ``repack`` and ``threads_poll`` are llama.cpp settings (transformers has neither). ``mmproj``: a
    vision projector to load beside a GGUF; "auto" finds the one made for it in its folder, if any."""
    kind = backend or default_backend(ref)
    if kind == "hf" and mmproj not in (None, "auto", "none"):
        raise HearthError("images need a GGUF model with its projector (mmproj); the transformers "
                          "backend reads text only for now")
    if kind == "hf":
        hf = import_hf()  # torch + transformers: only when this backend is chosen
        be = hf.load(ref, n_ctx=n_ctx, quant=quant, device=device, max_memory=max_memory,
                     n_threads=n_threads, allow_pickle=allow_pickle, allow_remote_code=allow_remote_code)
        return be, lambda root: hf.source_sha256(ref.path, memo_dir=root)
    if kind == "llama_cpp":
        if ref.kind != "gguf":
            raise HearthError(f"{ref.label} is a transformers folder; the llama.cpp backend needs a "
                              ".gguf file, so choose the transformers (hf) backend")
        if quant != "none":
            raise HearthError("int8/int4 are transformers-backend choices; a GGUF file carries its "
                              "own quantization (pick another GGUF file to change it)")
        from ..backends.llama.backend import LlamaCppBackend  # native library: load only when asked
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
        if n_ctx is None:
            n_ctx = min(info.n_ctx_train or DEFAULT_CTX, DEFAULT_CTX)
        lb = LlamaCppBackend(ref.path, n_ctx=n_ctx, n_threads=n_threads,
                             n_gpu_layers=n_gpu_layers, kv_type=kv_type, repack=repack, info=info,
                             exactness=exactness, threads_poll=threads_poll, mmproj=mmproj)
        return lb, lambda root: file_sha256(ref.path, memo_dir=root)
    raise HearthError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")


def import_hf():
    """The transformers backend package, or a clear message when the optional
    packages are not installed (the app's default set-up is GGUF-only)."""
    try:
        from ..backends import hf
    except ImportError as e:
        import sys

        how = ("this Hearth bundle is the lite flavour; install the full bundle for transformers models"
               if getattr(sys, "frozen", False) else
               "run `python3 scripts/setup.py --hf` to add torch, transformers and bitsandbytes")
        raise HearthError(f"the transformers backend is not installed ({e.name or e}); {how}") from None
    return hf

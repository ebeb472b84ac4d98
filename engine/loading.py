"""Opening a backend for a model reference, and finding a draft model on disk.

``Engine.load`` is the public entry; this module holds the choice of backend
and the optional-package message, so the engine itself stays about requests.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from .backends.base import Backend
from .errors import HearthError
from .models.catalogue import BACKENDS, ModelRef, default_backend
from .spec.drafts import check_draft_compatible
from .types import Vocab

DEFAULT_CTX = 8192


def open_backend(ref: ModelRef, *, backend: str | None, n_ctx: int | None, n_threads: int | None,
                 n_gpu_layers: int, kv_type: str, quant: str, device: str, max_memory: dict | None,
                 allow_pickle: bool, allow_remote_code: bool,
                 repack: bool, exactness: str = "exact") -> tuple[Backend, Callable[[Path], str]]:
    """The backend for a local ``ref`` (a Hub id is fetched before this), and a
    function giving the model's SHA-256 (memoised under a folder) for the disk cache key."""
    kind = backend or default_backend(ref)
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
        from .backends.llama.backend import LlamaCppBackend  # native library: load only when asked
        from .models.digest import file_sha256
        from .models.gguf import model_info

        info = model_info(ref.path)
        if n_ctx is None:
            n_ctx = min(info.n_ctx_train or DEFAULT_CTX, DEFAULT_CTX)
        lb = LlamaCppBackend(ref.path, n_ctx=n_ctx, n_threads=n_threads,
                             n_gpu_layers=n_gpu_layers, kv_type=kv_type, repack=repack, info=info,
                             exactness=exactness)
        return lb, lambda root: file_sha256(ref.path, memo_dir=root)
    raise HearthError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")


def import_hf():
    """The transformers backend package, or a clear message when the optional
    packages are not installed (the app's default set-up is GGUF-only)."""
    try:
        from .backends import hf
    except ImportError as e:
        import sys

        how = ("this Hearth bundle is the lite flavour; install the full bundle for transformers models"
               if getattr(sys, "frozen", False) else
               "run `python3 scripts/setup.py --hf` to add torch, transformers and bitsandbytes")
        raise HearthError(f"the transformers backend is not installed ({e.name or e}); {how}") from None
    return hf


def find_draft_for(target: Vocab) -> Path | None:
    """A compatible draft among the local model files: the smallest GGUF in the
    model folder (benchmark pair included) whose vocabulary matches the
    target's and whose weights are at most half the target's."""
    from .models.catalogue import model_dir
    from .models.gguf import model_info
    from .sizing.shape import spec_from_gguf

    if not target.path:
        return None  # a transformers folder: no GGUF header to compare drafts against
    best: tuple[int, Path] | None = None
    folder = model_dir()
    for p in sorted(folder.glob("*.gguf")) if folder.is_dir() else []:
        if p.resolve() == Path(target.path).resolve():
            continue
        try:
            if spec_from_gguf(p).weight_bytes * 2 > target.weight_bytes:
                continue  # too big to draft: decided from the sizes, without reading its vocabulary
            info = model_info(p)
        except (HearthError, OSError):  # unreadable, or gone since the listing
            continue
        if check_draft_compatible(target, info.vocab()) is None and (best is None or info.weight_bytes < best[0]):
            best = (info.weight_bytes, p)
    return best[1] if best else None


def draft_header_vocab(path: str | os.PathLike[str]) -> Vocab | None:
    """A GGUF draft's vocabulary from its header (checked before loading it), or
    None for a transformers folder (checked after loading)."""
    from .models.catalogue import resolve
    from .models.gguf import model_info

    ref = resolve(path)
    return model_info(ref.path).vocab() if ref.kind == "gguf" else None

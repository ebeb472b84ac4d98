"""Finding a draft model on disk for speculative decoding, and reading a draft's vocabulary."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import HearthError
from ..models.vocab import Vocab, check_draft_compatible


def find_draft_for(target: Vocab) -> Path | None:
    """A compatible draft among the local model files: the smallest GGUF in the
    model folder (benchmark pair included) whose vocabulary matches the
    target's and whose weights are at most half the target's."""
    from ..models.catalogue import model_dir
    from ..models.gguf import model_info
    from .shape import spec_from_gguf

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
    from ..models.catalogue import resolve
    from ..models.gguf import model_info

    ref = resolve(path)
    return model_info(ref.path).vocab() if ref.kind == "gguf" else None

"""Finding a draft model on disk for speculative decoding, and reading a draft's vocabulary."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import HearthError
from ..models.vocab import Vocab, check_draft_compatible


# More than any GGUF header holds (a 262k-token vocabulary with its scores is ~7 MB): a file
# bigger than this plus half the target's weights cannot hold a draft's weights.
HEADER_ALLOWANCE = 64 << 20


def draft_candidates(target_path: str, target_weight_bytes: int) -> list[Path]:
    """The GGUF files in the model folder small enough to draft for the target (weights at most half
    the target's), smallest first. Files are ruled out by their size on disk before any header is
    read: every load looks for a draft, and reading each big neighbour's header (a walk over its
    whole vocabulary) made a folder of models cost seconds of GIL-bound work while the window waited."""
    from ..models.catalogue import model_dir
    from .shape import spec_from_gguf

    folder = model_dir()
    out: list[tuple[int, Path]] = []
    for p in sorted(folder.glob("*.gguf")) if folder.is_dir() else []:
        try:
            if p.resolve() == Path(target_path).resolve() or \
                    (p.stat().st_size - HEADER_ALLOWANCE) * 2 > target_weight_bytes:
                continue
            weights = spec_from_gguf(p).weight_bytes
        except (HearthError, OSError):  # unreadable, or gone since the listing
            continue
        if weights * 2 <= target_weight_bytes:
            out.append((weights, p))
    return [p for _, p in sorted(out)]


def find_draft_for(target: Vocab, candidates: list[Path] | None = None) -> Path | None:
    """A compatible draft among the local model files: the smallest GGUF in the
    model folder (benchmark pair included) whose vocabulary matches the
    target's and whose weights are at most half the target's. ``candidates``:
    draft_candidates' answer when the caller has it already."""
    from ..models.gguf import model_info

    if not target.path:
        return None  # a transformers folder: no GGUF header to compare drafts against
    if candidates is None:
        candidates = draft_candidates(target.path, target.weight_bytes)
    for p in candidates:
        try:
            info = model_info(p)
        except (HearthError, OSError):
            continue
        if check_draft_compatible(target, info.vocab()) is None:
            return p
    return None


def draft_header_vocab(path: str | os.PathLike[str]) -> Vocab | None:
    """A GGUF draft's vocabulary from its header (checked before loading it), or
    None for a transformers folder (checked after loading)."""
    from ..models.catalogue import resolve
    from ..models.gguf import model_info

    ref = resolve(path)
    return model_info(ref.path).vocab() if ref.kind == "gguf" else None

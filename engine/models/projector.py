"""Vision projectors (``mmproj`` GGUF files): known by their header, paired with the model beside them.

A projector is a GGUF whose ``general.architecture`` is ``clip`` with a vision
encoder; its file name says nothing reliable (``mmproj-model-f16.gguf``,
``gemma-3-4b-it-mmproj.gguf``, ``vision.gguf``). It belongs to a model when its
output width (``clip.vision.projection_dim``) equals the model's embedding size.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..errors import HearthError
from .gguf_header import read_architecture, read_gguf


def projector_width(path: str | os.PathLike[str]) -> int | None:
    """The projector's output width if ``path`` is a vision projector, else None (any model,
    an unreadable file, an audio-only projector)."""
    if read_architecture(path) != "clip":  # a model: decided from its first key, not its whole header
        return None
    try:
        m = read_gguf(path, vocab=False).metadata
    except (HearthError, OSError):
        return None
    if m.get("general.architecture") != "clip" or not m.get("clip.has_vision_encoder"):
        return None
    width = m.get("clip.vision.projection_dim")
    return int(width) if isinstance(width, int) else None


def projector_memory(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(weights, compute buffer) bytes of a vision projector file (see ``memory_of``)."""
    g = read_gguf(path, vocab=False)
    return memory_of(g.metadata, sum(t.nbytes for t in g.tensors))


def memory_of(m: Mapping[str, Any], weights: int) -> tuple[int, int]:
    """(weights, compute buffer) of a projector from its header. The compute buffer is what one
    tile's forward holds at its peak: the widest activation of every patch (eight of them live at
    once, as measured on a SigLIP-style encoder) plus each head's attention scores, in f32
    (libmtmd reserves it at load, with a warm-up image of the encoder's own size)."""
    def num(key: str, default: int = 0) -> int:
        v = m.get(key, default)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default

    size, patch = num("clip.vision.image_size", 224), max(1, num("clip.vision.patch_size", 14))
    patches = (size // patch) ** 2 + 1
    width = max(num("clip.vision.embedding_length", 1024), num("clip.vision.feed_forward_length", 4096))
    heads = max(1, num("clip.vision.attention.head_count", 16))
    return weights, 4 * (8 * patches * width + heads * patches * patches)


def is_projector(path: str | os.PathLike[str]) -> bool:
    return read_architecture(path) == "clip"


def find_projector(model: str | os.PathLike[str], n_embd: int) -> Path | None:
    """The vision projector in the model's folder made for it (its width is the model's
    ``n_embd``); with several, the one whose name shares most with the model's, then f16 over
    f32 (the size llama.cpp's converter writes by default). None when there is none."""
    folder = Path(model).parent
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix == ".gguf" and p.is_file()
                       and p.resolve() != Path(model).resolve())
    except OSError:
        return None
    stem = Path(model).stem.lower()

    def shared(p: Path) -> int:
        a, n = p.stem.lower(), 0
        while n < min(len(a), len(stem)) and a[n] == stem[n]:
            n += 1
        return n

    found = [p for p in files if projector_width(p) == n_embd]
    if not found:
        return None
    return max(found, key=lambda p: (shared(p), "f16" in p.name.lower(), -p.stat().st_size))

"""``python -m engine bench images --model VLM.gguf [--mmproj PROJ.gguf]``: TTFT of a question about
an image cold (encoded and read), a second question about the same image in the same conversation
(read from the prefix cache: no encode), and the same image in a new conversation whose KV is gone
(its encoded rows kept: no encode, only the read). Rounds interleave; every figure is a ratio against
the cold run of the same round, and the encodes are counted (the deterministic check beside it)."""
from __future__ import annotations

import argparse
import io
import statistics
from typing import Any

from ..images import probe
from ..messages import ImagePart, Message, TextPart
from .prefix import _ttft


def _picture(seed: int, size: tuple[int, int]) -> bytes:
    import numpy as np
    from PIL import Image

    a = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    return buf.getvalue()


def run(a: argparse.Namespace) -> dict[str, Any]:
    from ..engine import Engine

    if not a.model:
        raise SystemExit("bench images needs --model: a vision GGUF (its projector beside it, or --mmproj)")
    e = Engine.load(a.model, n_ctx=a.ctx or 4096, n_threads=a.threads, mmproj=getattr(a, "mmproj", None) or "auto")
    if not e.backend.sees_images:
        raise SystemExit(f"{a.model} has no vision projector beside it; pass --mmproj")
    proj = e.backend._projector  # type: ignore[attr-defined]
    cold, follow, fresh, encodes, encode_ms = [], [], [], [], []
    try:
        for i in range(a.rounds):
            data = _picture(i, (640, 480))
            img = probe(data)
            part = ImagePart(img.sha256, img.mime, data)
            first = [Message.of("user", part, TextPart("What is in this picture?"))]
            e.reset()
            e.cache.clear()
            proj.forget()
            n0, s0 = proj.encodes, proj.encode_s
            t_cold, _ = _ttft(e, first)
            encode_ms.append((proj.encode_s - s0) * 1e3)
            n1 = proj.encodes
            answer = Message("assistant", "It is noise.")
            t_follow, _ = _ttft(e, first + [answer, Message("user", "And what colour is it?")])
            n2 = proj.encodes
            e.reset()
            e.cache.clear()  # the KV and its snapshots gone; the encoded rows kept
            t_fresh, _ = _ttft(e, [Message.of("user", part, TextPart("Describe it in one word."))])
            cold.append(t_cold)
            follow.append(t_follow)
            fresh.append(t_fresh)
            encodes.append({"cold": n1 - n0, "follow_up": n2 - n1, "new_conversation": proj.encodes - n2})
    finally:
        info = e.backend.describe()
        e.close()
    ratio = lambda xs: statistics.median(c / x for c, x in zip(cold, xs))  # noqa: E731
    return {"bench": "images", "model": info.name, "projector": info.projector, "rounds": a.rounds,
            "image": "640x480 PNG", "ttft_ms": {"cold": statistics.median(cold), "follow_up": statistics.median(follow),
                                                "new_conversation_rows_kept": statistics.median(fresh),
                                                "cold_encode_part": statistics.median(encode_ms)},
            "speedup_vs_cold": {"follow_up": ratio(follow), "new_conversation_rows_kept": ratio(fresh)},
            "encodes": encodes}

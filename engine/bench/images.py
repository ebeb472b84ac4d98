"""``python -m engine bench images --model VLM.gguf [--mmproj PROJ.gguf]``: TTFT of a question about
an image that opens a conversation (after a system prompt), cold (encoded and read); a second
question in the same conversation (the prefix cache); the same image opening a new conversation
(its pinned prefix, in memory); and that new conversation after a restart (a new engine reading the
disk store). No row encodes the image again. Rounds interleave, each with a new picture; every figure
is a ratio against the cold run of the same round, and the encodes are counted beside it."""
from __future__ import annotations

import argparse
import io
import statistics
from typing import Any

from ..inputs.images import probe_image
from ..prompt.messages import ImagePart, Message, TextPart
from .prefix import _ttft


def _picture(seed: int, size: tuple[int, int]) -> bytes:
    import numpy as np
    from PIL import Image

    a = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    return buf.getvalue()


SYSTEM = "You describe pictures for a blind reader, plainly and briefly."


def bench_images(a: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    from ..engine import Engine
    from ..config import EngineConfig

    if not a.model:
        raise SystemExit("bench images needs --model: a vision GGUF (its projector beside it, or --mmproj)")
    kw: dict[str, Any] = dict(n_ctx=a.ctx or 4096, n_threads=a.threads, mmproj=getattr(a, "mmproj", None) or "auto")
    store = tempfile.TemporaryDirectory(prefix="hearth-bench-images-")
    e = Engine.open(EngineConfig(a.model, disk_cache=store.name, **kw))
    if not e.backend.sees_images:
        e.close()
        raise SystemExit(f"{a.model} has no vision projector beside it; pass --mmproj")
    proj = e.backend._projector  # type: ignore[attr-defined]
    rows: dict[str, list[float]] = {k: [] for k in ("cold", "follow_up", "new_conversation", "after_restart")}
    encodes, encode_ms = [], []
    try:
        for i in range(a.rounds):
            data = _picture(i, (640, 480))  # a new picture each round: nothing of it is cached yet
            img = probe_image(data)
            part = ImagePart(img.sha256, img.mime, data)
            ask = lambda q: [Message("system", SYSTEM), Message.of("user", part, TextPart(q))]  # noqa: E731
            e.reset()
            e.cache.clear()
            proj.forget()
            n0, s0 = proj.encodes, proj.encode_s
            t, _ = _ttft(e, ask("What is in this picture?"))
            rows["cold"].append(t)
            encode_ms.append((proj.encode_s - s0) * 1e3)
            n1 = proj.encodes
            follow = ask("What is in this picture?") + [Message("assistant", "It is noise."),
                                                        Message("user", "And what colour is it?")]
            rows["follow_up"].append(_ttft(e, follow)[0])
            e.reset()  # another conversation: the live KV goes, the opening image's prefix stays cached
            rows["new_conversation"].append(_ttft(e, ask("Describe it in one word."))[0])
            n2 = proj.encodes
            # a restart: only the disk store
            restarted = Engine.open(EngineConfig(a.model, disk_cache=store.name, **kw))
            try:
                rows["after_restart"].append(_ttft(restarted, ask("Describe it in one word."))[0])
                n3 = restarted.backend._projector.encodes  # type: ignore[attr-defined]
            finally:
                restarted.close()
            encodes.append({"cold": n1 - n0, "follow_up_and_new_conversation": n2 - n1, "after_restart": n3})
    finally:
        info = e.backend.describe()
        e.close()
        store.cleanup()
    ratio = lambda xs: statistics.median(c / x for c, x in zip(rows["cold"], xs))  # noqa: E731
    return {"bench": "images", "model": info.name, "projector": info.projector, "rounds": a.rounds,
            "image": "640x480 PNG", "ttft_ms": {k: statistics.median(v) for k, v in rows.items()}
            | {"cold_encode_part": statistics.median(encode_ms)},
            "speedup_vs_cold": {k: ratio(v) for k, v in rows.items() if k != "cold"},
            "encodes": encodes}

"""A copy of a real GGUF file with metadata added or replaced, written by gguf-py (llama.cpp's own writer):
the weights and vocabulary stay as they were, so the copy loads and runs like the original."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

# llama.cpp reads these general.sampling keys as 32-bit integers (common.cpp get_int32); the rest as floats
INT_KEYS = ("general.sampling.top_k", "general.sampling.penalty_last_n", "general.sampling.mirostat")


def with_metadata(src: Path, dst: Path, values: dict[str, Any]) -> Path:
    """``src`` written to ``dst`` with ``values`` ({key: int, float or str}) in its header."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata, get_field_data

    def details(key: str, v: Any) -> MetadataDetails:
        if isinstance(v, str):
            return MetadataDetails(gguf.GGUFValueType.STRING, v)
        if isinstance(v, int) and key in INT_KEYS:
            return MetadataDetails(gguf.GGUFValueType.INT32, v)
        return MetadataDetails(gguf.GGUFValueType.FLOAT32, float(v))

    reader = gguf.GGUFReader(src, "r")
    writer = gguf.GGUFWriter(dst, arch=get_field_data(reader, gguf.Keys.General.ARCHITECTURE),
                             endianess=reader.endianess)
    alignment = get_field_data(reader, gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment
    copy_with_new_metadata(reader, writer, {k: details(k, v) for k, v in values.items()}, [])
    return dst


# What a thinking model's authors ask for (Qwen3: temperature 0.6, top-p 0.95, top-k 20), as a GGUF carries it.
QWEN3_SAMPLING = {"general.sampling.temp": 0.6, "general.sampling.top_p": 0.95, "general.sampling.top_k": 20,
                  "general.sampling.min_p": 0.0, "general.sampling.penalty_repeat": 1.05,
                  "general.sampling.penalty_last_n": 128, "general.sampling.mirostat": 2}


def same_renamed_and_other(src: Path, where: Path) -> tuple[Path, Path, Path]:
    """Model A (a copy of ``src``), a renamed copy of A in another folder (same content, so the same
    model to its settings), and model B (``src`` with other metadata: other content)."""
    a = where / "a.gguf"
    shutil.copyfile(src, a)
    (where / "moved").mkdir()
    renamed = where / "moved" / "a-renamed.gguf"
    shutil.copyfile(a, renamed)
    return a, renamed, with_metadata(Path(src), where / "b.gguf", {"general.name": "model B"})

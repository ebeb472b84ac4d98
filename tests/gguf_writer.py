"""A minimal GGUF writer for tests: hand-made headers for odd or hostile files."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(v: Any) -> bytes:
    if isinstance(v, bool):
        return struct.pack("<I?", 7, v)
    if isinstance(v, int):
        return struct.pack("<Iq", 11, v) if v < 0 else struct.pack("<IQ", 10, v)
    if isinstance(v, float):
        return struct.pack("<Id", 12, v)
    if isinstance(v, str):
        return struct.pack("<I", 8) + _str(v)
    if isinstance(v, list):
        if all(isinstance(x, str) for x in v):
            return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(_str(x) for x in v)
        return struct.pack("<IIQ", 9, 5, len(v)) + struct.pack(f"<{len(v)}i", *v)
    raise TypeError(type(v))


def write_gguf(path: Path, metadata: dict[str, Any], tensors: list[tuple[str, tuple[int, ...], int]] = (),
               data_bytes: int | None = None) -> Path:
    """Write a GGUF v3 header; tensors are (name, shape, ggml type id), F32 data zero-filled.

    ``data_bytes`` overrides how much tensor data is written (to make a truncated file).
    """
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for k, v in metadata.items():
        head += _str(k) + _value(v)
    offset, total = 0, 0
    for name, shape, type_id in tensors:
        head += _str(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
        head += struct.pack("<IQ", type_id, offset)
        n = 4
        for d in shape:
            n *= d
        offset += (n + 31) // 32 * 32
        total = offset
    pad = (-len(head)) % 32
    data = b"\0" * (total if data_bytes is None else data_bytes)
    path.write_bytes(head + b"\0" * pad + data)
    return path

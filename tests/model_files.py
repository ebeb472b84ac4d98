"""Real, valid GGUF files of real architectures for library and Hub tests, at no disk cost.

The header (metadata, vocabulary, tensor table) is what llama.cpp's converter
would write for the architecture in tests/fixtures/sizing/make_fixtures.py; the
tensor data is a sparse hole, so a "7B" file has its true size on disk listings
but uses a few MB. engine.models.gguf reads these like downloaded files.
"""
from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

from engine.models.gguf_header import DEFAULT_ALIGNMENT, GGML_TYPES

_HERE = Path(__file__).parent / "fixtures" / "sizing"
_spec = importlib.util.spec_from_file_location("make_fixtures_mf", _HERE / "make_fixtures.py")
mf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mf)  # type: ignore[union-attr]
_TYPE_IDS = {name: tid for tid, (name, _b, _s) in GGML_TYPES.items()}


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(v) -> bytes:
    if isinstance(v, int):
        return struct.pack("<IQ", 10, v)
    if isinstance(v, str):
        return struct.pack("<I", 8) + _str(v)
    if isinstance(v, list):
        return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(_str(x) for x in v)
    raise TypeError(type(v))


def gguf_bytes_header(arch: str, name: str, quant: str, *, tokens: list[str] | None = None,
                      shard: tuple[int, int] = (0, 1)) -> tuple[bytes, int]:
    """(header bytes up to the aligned data start, the whole file's size). The vocabulary
    defaults to 256 tokens (``vocab_size`` still says the real count): parsing stays quick.
    ``shard`` (i, n): the i-th of n parts of a split file, holding every n-th tensor."""
    a = mf.ARCHS[arch]
    meta = mf.gguf_meta(a, name, quant)
    meta["tokenizer.ggml.model"] = "gpt2"
    meta["tokenizer.ggml.tokens"] = tokens if tokens is not None else [f"t{i}" for i in range(256)]
    tensors = mf.gguf_tensors(a, quant)[shard[0]::shard[1]]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for k, v in meta.items():
        head += _str(k) + _value(v)
    offset = 0
    for tname, shape, tt in tensors:
        _n, block, size = GGML_TYPES[_TYPE_IDS[tt]]
        n = 1
        for d in shape:
            n *= d
        head += _str(tname) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
        head += struct.pack("<IQ", _TYPE_IDS[tt], offset)
        offset += (n // block * size + DEFAULT_ALIGNMENT - 1) // DEFAULT_ALIGNMENT * DEFAULT_ALIGNMENT
    head += b"\0" * ((-len(head)) % DEFAULT_ALIGNMENT)
    return head, len(head) + offset


def write_model_gguf(path: Path, arch: str = "qwen2.5-0.5b", quant: str = "Q4_K_M", *,
                     name: str | None = None, tokens: list[str] | None = None) -> Path:
    """A valid GGUF of ``arch`` at ``quant`` whose tensor data is a sparse hole."""
    head, size = gguf_bytes_header(arch, name or f"{arch}-{quant}", quant, tokens=tokens)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path

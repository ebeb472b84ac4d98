"""A small, strict GGUF header reader.

We read GGUF metadata ourselves rather than through llama.cpp because the
sizing planner, the draft-compatibility check and ``python -m engine info``
need it *before* (or without) loading weights, and because a truncated or
corrupt file must produce a clear message instead of a crash inside C code.

Only the header is parsed (metadata + tensor table); tensor data is never
read, but its extent is checked against the file size so a truncated download
is caught here.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import ModelFileError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# ggml tensor type id -> (name, elements per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}

# llama_ftype as stored in general.file_type (the quantization the file was made as)
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
    16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
    22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE",
}

# GGUF metadata value types: id -> struct format (scalars only)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_COUNT_ONLY_ABOVE = 512  # read_gguf(vocab=False): longer string arrays are counted, not decoded

# Hard limits that no real model reaches; beyond them the header is garbage.
_MAX_TENSORS = 1_000_000
_MAX_KV = 100_000
_MAX_DIMS = 8


@dataclass(slots=True, frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int  # relative to the start of the data section

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.type_id, (f"type{self.type_id}", 1, 0))[0]

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        _, block, size = GGML_TYPES[self.type_id]
        return self.n_elements // block * size


@dataclass(slots=True)
class GGUFFile:
    """Raw parse result: every metadata key and the tensor table."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int
    file_size: int


# Keys no part of Hearth reads: walked over, never decoded (a BPE vocabulary's merges
# are as many strings as its tokens).
_UNUSED_KEYS = frozenset({"tokenizer.ggml.merges"})


class CountedStrings(Sequence[str]):
    """A string array that was walked over, not decoded: only its length is known.

    ``read_gguf(..., vocab=False)`` leaves one where a vocabulary would be, so that a
    header read for sizes (the library's listing, the planner) costs a walk over the
    lengths, not 100k+ decoded strings held under the GIL."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        raise TypeError("this GGUF header was read without its strings (read_gguf(vocab=False))")

    def __repr__(self) -> str:
        return f"CountedStrings({self.n})"


class _Reader:
    __slots__ = ("buf", "pos", "size", "path", "vocab")

    def __init__(self, buf: mmap.mmap | bytes, path: Path, *, vocab: bool = True) -> None:
        self.buf, self.pos, self.size, self.path = buf, 0, len(buf), path
        self.vocab = vocab  # False: long string arrays are counted, not decoded

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise ModelFileError(
                f"{self.path.name}: GGUF header is truncated or corrupt "
                f"(needed {n} bytes at offset {self.pos}, file has {self.size})"
            )

    def scalar(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def string(self) -> str:
        n = self.scalar("<Q")
        self.need(n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int, *, decode: bool = True) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.scalar("<I")
            count = self.scalar("<Q")
            if etype in _SCALARS:
                fmt = _SCALARS[etype]
                width = struct.calcsize(fmt)
                self.need(count * width)
                out = list(struct.unpack_from(f"<{count}{fmt[1]}", self.buf, self.pos))
                self.pos += count * width
                return out
            if etype == _STRING:
                if not decode or (not self.vocab and count > _COUNT_ONLY_ABOVE):
                    self._skip_strings(count)
                    return CountedStrings(count)
                return self._string_array(count)
            if etype == _ARRAY:
                return [self.value(_ARRAY) for _ in range(count)]
            raise ModelFileError(f"{self.path.name}: unknown GGUF array element type {etype}")
        raise ModelFileError(f"{self.path.name}: unknown GGUF value type {vtype}")

    def _skip_strings(self, count: int) -> None:
        """Walk over ``count`` strings, checking each length against the file."""
        buf, pos, size = self.buf, self.pos, self.size
        unpack = struct.Struct("<Q").unpack_from
        for _ in range(count):
            if pos + 8 > size:
                self.pos = pos
                self.need(8)
            pos += 8 + unpack(buf, pos)[0]
        if pos > size:
            self.pos = size
            self.need(1)
        self.pos = pos

    def _string_array(self, count: int) -> list[str]:
        # Vocabularies have 50k-250k entries; keep this loop tight.
        buf, pos, size = self.buf, self.pos, self.size
        unpack = struct.Struct("<Q").unpack_from
        out: list[str] = []
        append = out.append
        for _ in range(count):
            if pos + 8 > size:
                self.pos = pos
                self.need(8)
            (n,) = unpack(buf, pos)
            pos += 8
            if pos + n > size:
                self.pos = pos
                self.need(n)
            append(buf[pos:pos + n].decode("utf-8", errors="replace"))
            pos += n
        self.pos = pos
        return out


def read_gguf(path: str | os.PathLike[str], *, vocab: bool = True) -> GGUFFile:
    """Parse a GGUF file's header. Raises ModelFileError with a clear message.

    ``vocab=False``: string arrays longer than a few hundred entries (the vocabulary)
    are walked over and left as :class:`CountedStrings`; everything else is read."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelFileError(f"{p} is a folder, not a GGUF file")
    try:
        fh = open(p, "rb")
    except OSError as e:
        raise ModelFileError(f"cannot open model file {p}: {e.strerror or e}") from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size < 24:
            raise ModelFileError(f"{p.name} is not a GGUF model file (only {size} bytes)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if mm[:4] != GGUF_MAGIC:
                raise ModelFileError(f"{p.name} is not a GGUF model file (bad magic {bytes(mm[:4])!r})")
            return _parse(_Reader(mm, p, vocab=vocab), size)


def read_architecture(path: str | os.PathLike[str]) -> str | None:
    """``general.architecture`` of a GGUF file, read from the header's first keys only (the
    writer puts it first), or None for anything else: not a GGUF, unreadable, no such key.
    Telling a projector ("clip") from a model this way costs microseconds, not a walk over a
    vocabulary of 150k strings: a folder of models is scanned for projectors at every load."""
    try:
        with open(Path(path).expanduser(), "rb") as fh, \
                mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if mm[:4] != GGUF_MAGIC:
                return None
            r = _Reader(mm, Path(path), vocab=False)
            r.pos = 8  # magic, version
            r.scalar("<Q")
            for _ in range(min(r.scalar("<Q"), _MAX_KV)):
                key, vtype = r.string(), r.scalar("<I")
                if key == "general.architecture":
                    v = r.value(vtype)
                    return v if isinstance(v, str) else None
                r.value(vtype, decode=False)
    except (ModelFileError, OSError, ValueError):  # ValueError: an empty file cannot be mapped
        return None
    return None


def _parse(r: _Reader, size: int) -> GGUFFile:
    r.pos = 4
    version = r.scalar("<I")
    if version not in (2, 3):
        raise ModelFileError(f"{r.path.name}: unsupported GGUF version {version} (expected 2 or 3)")
    n_tensors = r.scalar("<Q")
    n_kv = r.scalar("<Q")
    if n_tensors > _MAX_TENSORS or n_kv > _MAX_KV:
        raise ModelFileError(f"{r.path.name}: GGUF header is corrupt (tensor/key counts out of range)")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.scalar("<I"), decode=key not in _UNUSED_KEYS)
    tensors: list[TensorInfo] = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.scalar("<I")
        if n_dims > _MAX_DIMS:
            raise ModelFileError(f"{r.path.name}: tensor {name!r} has {n_dims} dimensions; header is corrupt")
        shape = tuple(r.scalar("<Q") for _ in range(n_dims))
        type_id = r.scalar("<I")
        offset = r.scalar("<Q")
        if type_id not in GGML_TYPES:
            raise ModelFileError(f"{r.path.name}: tensor {name!r} has unknown type id {type_id}")
        tensors.append(TensorInfo(name, shape, type_id, offset))
    align = int(meta.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT
    data_offset = (r.pos + align - 1) // align * align
    end = max((data_offset + t.offset + t.nbytes for t in tensors), default=data_offset)
    if end > size:
        missing = end - size
        raise ModelFileError(
            f"{r.path.name} is truncated: tensor data needs {end:,} bytes but the file has "
            f"{size:,} ({missing:,} missing). Download it again."
        )
    return GGUFFile(r.path, version, meta, tensors, data_offset, size)

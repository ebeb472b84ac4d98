"""System-prompt KV snapshots on disk, so a restart does not prefill them again.

An entry's identity is the *content* of the model file (a SHA-256, memoised
by path/size/mtime so it is computed once per file version), the backend and
its state-format version, and every setting that changes the KV bytes (KV
type). A file whose header, identity or checksum does not match is deleted
and ignored, never restored. A prefix that holds images is stored with its
tokens made portable (``engine.media.portable``) and the images' names (SHA-256
and appearance) in its header; both are compared in full before a restore.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np
import xxhash

from ..atomic import atomic_write

log = logging.getLogger("hearth.prefix_store")

MAGIC = b"HEARTHKV1\n"
DEFAULT_DISK_BUDGET = 2 * 1024 ** 3  # the app's cap on the folder; least recently used entries go first


def store_usage(root: Path) -> tuple[int, int]:
    """(entries, bytes) of every snapshot in the folder, whatever model made it."""
    files = list(Path(root).glob("*.kv")) if Path(root).is_dir() else []
    total = 0
    for f in files:
        try:
            total += f.stat().st_size
        except OSError:  # removed meanwhile
            pass
    return len(files), total


def clear_store(root: Path) -> int:
    """Delete every snapshot in the folder (the window's "Clear cache"); returns bytes freed."""
    freed = 0
    for f in list(Path(root).glob("*.kv")) if Path(root).is_dir() else []:
        try:
            freed += f.stat().st_size
            f.unlink()
        except OSError:
            pass
    return freed


class PrefixStore:
    def __init__(self, root: Path, identity: dict[str, str], *, max_bytes: int | None = None) -> None:
        """``identity``: model hash, backend, state format version, KV-changing settings.
        ``max_bytes``: cap on the whole folder; saving evicts least recently used entries."""
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.evictions = 0
        self.identity: dict[str, str] = {}
        self._id_digest = ""
        self.rekey(identity)
        self.rejected = 0

    def rekey(self, changes: dict[str, str]) -> None:
        """The context's settings changed (``changes``: the fields that differ, say another number of
        sequences): from now on entries are saved and found under the new identity. Entries of the old one
        stay on disk, untouched, for when the context is made as it was again."""
        self.identity = dict(sorted({**self.identity, **changes}.items()))
        self._id_digest = hashlib.sha256(json.dumps(self.identity).encode()).hexdigest()

    def _path(self, tokens: np.ndarray, images: Sequence[str] = ()) -> Path:
        named = "\n".join(images).encode()
        h = hashlib.sha256(self._id_digest.encode() + tokens.tobytes() + named).hexdigest()
        return self.root / f"{h[:32]}.kv"

    def save(self, tokens: Sequence[int], state: bytes | bytearray, images: Sequence[str] = ()) -> Path:
        """Store ``state`` for exactly ``tokens`` (portable ids, with ``images`` naming their slots)."""
        arr = np.asarray(tokens, dtype=np.int32)
        payload = arr.tobytes() + bytes(state)
        header = json.dumps({"identity": self.identity, "n_tokens": len(arr), "state_len": len(state),
                             "images": list(images), "xxh3_64": xxhash.xxh3_64_intdigest(payload)}).encode()
        path = self._path(arr, images)
        blob = MAGIC + struct.pack("<I", len(header)) + header + payload
        if self.max_bytes is not None and len(blob) > self.max_bytes:
            return path  # could never fit: write nothing rather than evict everything
        atomic_write(path, blob)
        self._enforce_cap(keep=path)
        return path

    def _enforce_cap(self, keep: Path) -> None:
        """Delete the least recently used snapshots until the folder fits ``max_bytes``.

        Use is the file's mtime: ``load`` touches an entry it serves."""
        if self.max_bytes is None:
            return
        entries = []
        for f in self.root.glob("*.kv"):
            try:
                st = f.stat()
            except OSError:
                continue
            entries.append((st.st_mtime_ns, st.st_size, f))
        total = sum(size for _, size, _ in entries)
        for _, size, f in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            if f == keep:
                continue
            f.unlink(missing_ok=True)
            total -= size
            self.evictions += 1

    def load(self, tokens: Sequence[int], images: Sequence[str] = ()) -> bytearray | None:
        """The stored state for exactly ``tokens``, or None. Bad files are deleted.

        The file is read once into the buffer that is returned, and checked through
        views of it: a restart's first reply waits on this, and each extra copy of a
        snapshot of tens of MB costs as much as its checksum."""
        arr = np.asarray(tokens, dtype=np.int32)
        path = self._path(arr, images)
        if not path.exists():
            return None
        try:
            with open(path, "rb") as f:
                data = bytearray(os.fstat(f.fileno()).st_size)
                got = f.readinto(data)
            if got != len(data):
                del data[got:]  # shrunk while being read: the checks below see it truncated
            why, offset = self._check(data, arr, images)
        except OSError as e:
            why, offset = f"unreadable ({e.strerror})", 0
        if why:
            self.reject(tokens, why, images)
            return None
        try:
            os.utime(path)  # recently used: the cap evicts others first
        except OSError:
            pass
        del data[:offset]  # the state alone; CPython drops a bytearray's head without moving the rest
        return data

    def _check(self, data: bytearray, arr: np.ndarray, images: Sequence[str]) -> tuple[str, int]:
        """("", where the state starts) for a sound entry; (why not, 0) otherwise."""
        if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
            return "bad magic", 0
        hlen = struct.unpack_from("<I", data, len(MAGIC))[0]
        start = len(MAGIC) + 4
        try:
            header = json.loads(bytes(data[start:start + hlen]))
        except ValueError:
            return "bad header", 0
        if not isinstance(header, dict) or not isinstance(header.get("state_len"), int):
            return "bad header", 0
        if header.get("identity") != self.identity:
            return "stale (model or settings changed)", 0
        if header.get("images", []) != list(images):
            return "image mismatch", 0
        with memoryview(data) as view, view[start + hlen:] as payload:  # released: the caller trims data
            if len(payload) != arr.nbytes + header["state_len"]:
                return "truncated", 0
            if not _sound(payload, header):
                return "checksum mismatch", 0
            if payload[:arr.nbytes] != arr.tobytes():
                return "token mismatch", 0
        return "", start + hlen + arr.nbytes

    def reject(self, tokens: Sequence[int], why: str, images: Sequence[str] = ()) -> None:
        """Drop an entry that failed a check (or failed to restore)."""
        self.rejected += 1
        path = self._path(np.asarray(tokens, dtype=np.int32), images)
        log.warning("dropping cached prefix %s: %s", path.name, why)
        path.unlink(missing_ok=True)


def _sound(payload: memoryview, header: dict) -> bool:
    """Whether ``payload`` is what was written: an XXH3-64 digest (what the store writes: it guards
    against a damaged or half-copied file, not an attacker, and a restart's first reply waits on it;
    35 MB take about 1.3 ms here against 23 ms for a CRC-32), or the CRC-32 or SHA-256 that entries
    of earlier releases carry."""
    if isinstance(header.get("xxh3_64"), int):
        return xxhash.xxh3_64_intdigest(payload) == header["xxh3_64"]
    if isinstance(header.get("crc32"), int):
        return zlib.crc32(payload) == header["crc32"]
    if isinstance(header.get("sha256"), str):
        return hashlib.sha256(payload).hexdigest() == header["sha256"]
    return False

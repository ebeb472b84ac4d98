"""System-prompt KV snapshots on disk, so a restart does not prefill them again.

An entry's identity is the *content* of the model file (a SHA-256, memoised
by path/size/mtime so it is computed once per file version), the backend and
its state-format version, and every setting that changes the KV bytes (KV
type). A file whose header, identity or checksum does not match is deleted
and ignored, never restored.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

log = logging.getLogger("hearth.prefix_store")

MAGIC = b"HEARTHKV1\n"
_HASH_MEMO = "model-hashes.json"


def file_sha256(path: Path, memo_dir: Path | None = None) -> str:
    """SHA-256 of a model file, memoised by (path, size, mtime) under memo_dir."""
    st = path.stat()
    memo_key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    memo_path = memo_dir / _HASH_MEMO if memo_dir else None
    memo: dict[str, str] = {}
    if memo_path and memo_path.exists():
        try:
            memo = json.loads(memo_path.read_text())
        except (OSError, ValueError):
            memo = {}
        if memo_key in memo:
            return memo[memo_key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    if memo_path:
        memo[memo_key] = digest
        _atomic_write(memo_path, json.dumps(memo).encode())
    return digest


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class PrefixStore:
    def __init__(self, root: Path, identity: dict[str, str]) -> None:
        """``identity``: model hash, backend, state format version, KV-changing settings."""
        self.root = Path(root)
        self.identity = dict(sorted(identity.items()))
        self._id_digest = hashlib.sha256(json.dumps(self.identity).encode()).hexdigest()
        self.rejected = 0

    def _path(self, tokens: np.ndarray) -> Path:
        h = hashlib.sha256(self._id_digest.encode() + tokens.tobytes()).hexdigest()
        return self.root / f"{h[:32]}.kv"

    def save(self, tokens: Sequence[int], state: bytes | bytearray) -> Path:
        arr = np.asarray(tokens, dtype=np.int32)
        payload = arr.tobytes() + bytes(state)
        header = json.dumps({"identity": self.identity, "n_tokens": len(arr), "state_len": len(state),
                             "sha256": hashlib.sha256(payload).hexdigest()}).encode()
        path = self._path(arr)
        _atomic_write(path, MAGIC + struct.pack("<I", len(header)) + header + payload)
        return path

    def load(self, tokens: Sequence[int]) -> bytearray | None:
        """The stored state for exactly ``tokens``, or None. Bad files are deleted."""
        arr = np.asarray(tokens, dtype=np.int32)
        path = self._path(arr)
        if not path.exists():
            return None
        try:
            data = path.read_bytes()
            why = self._check(data, arr)
        except OSError as e:
            why, data = f"unreadable ({e.strerror})", b""
        if why:
            self.reject(tokens, why)
            return None
        hlen = struct.unpack_from("<I", data, len(MAGIC))[0]
        return bytearray(data[len(MAGIC) + 4 + hlen + arr.nbytes:])

    def _check(self, data: bytes, arr: np.ndarray) -> str:
        if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
            return "bad magic"
        hlen = struct.unpack_from("<I", data, len(MAGIC))[0]
        start = len(MAGIC) + 4
        try:
            header = json.loads(data[start:start + hlen])
        except ValueError:
            return "bad header"
        if header.get("identity") != self.identity:
            return "stale (model or settings changed)"
        payload = data[start + hlen:]
        if len(payload) != arr.nbytes + header.get("state_len", -1):
            return "truncated"
        if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            return "checksum mismatch"
        if payload[:arr.nbytes] != arr.tobytes():
            return "token mismatch"
        return ""

    def reject(self, tokens: Sequence[int], why: str) -> None:
        """Drop an entry that failed a check (or failed to restore)."""
        self.rejected += 1
        path = self._path(np.asarray(tokens, dtype=np.int32))
        log.warning("dropping cached prefix %s: %s", path.name, why)
        path.unlink(missing_ok=True)

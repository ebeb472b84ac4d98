"""A model's identity by content: a file's SHA-256, memoised by path, size and mtime so a
large file is hashed once per version, and one over a transformers folder's files."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..atomic import atomic_write
from .hf_folder import PICKLE_SUFFIXES

_HASH_MEMO = "model-hashes.json"
# What a transformers folder is, for its identity: its config and its weights.
FOLDER_FILES = ("config.json",)
FOLDER_SUFFIXES = (".safetensors",) + PICKLE_SUFFIXES


def _memo_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def _read_memo(memo_path: Path | None) -> dict[str, str]:
    if memo_path is None or not memo_path.exists():
        return {}
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def file_sha256(path: Path, memo_dir: Path | None = None) -> str:
    """SHA-256 of a model file, memoised by (path, size, mtime) under memo_dir."""
    memo_key = _memo_key(path)
    memo_path = memo_dir / _HASH_MEMO if memo_dir else None
    memo = _read_memo(memo_path)
    if memo_key in memo:
        return memo[memo_key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    if memo_path:
        memo = _read_memo(memo_path)  # another thread or process may have added one meanwhile
        memo[memo_key] = digest
        atomic_write(memo_path, json.dumps(memo).encode())
    return digest


def memoised_sha256(path: Path, memo_dir: Path) -> str | None:
    """The file's SHA-256 if this version of it was hashed before, else None: never reads the file
    (the window asks this on its own thread, where hashing gigabytes would freeze it)."""
    try:
        return _read_memo(memo_dir / _HASH_MEMO).get(_memo_key(path))
    except OSError:
        return None


def identity_files(path: Path) -> list[Path]:
    """The files a transformers folder's identity covers, in a fixed order."""
    return [p for p in sorted(path.iterdir()) if p.name in FOLDER_FILES or p.name.endswith(FOLDER_SUFFIXES)]


def folder_sha256(path: Path, memo_dir: Path | None = None, *, memo_only: bool = False) -> str | None:
    """One SHA-256 over a folder's config and weight files (each hashed once, memoised); with
    ``memo_only`` None when any of them was not hashed yet."""
    h = hashlib.sha256()
    for p in identity_files(path):
        one = memoised_sha256(p.resolve(), memo_dir) if memo_only and memo_dir else \
            file_sha256(p.resolve(), memo_dir=memo_dir)
        if one is None:
            return None
        h.update(p.name.encode() + b"\0" + one.encode())
    return h.hexdigest()

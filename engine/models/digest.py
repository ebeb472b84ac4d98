"""A model file's identity by content: its SHA-256, memoised by path, size and
mtime so a large file is hashed once per version."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..atomic import atomic_write

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
        atomic_write(memo_path, json.dumps(memo).encode())
    return digest

"""The one atomic file write: a crash leaves the old file or the new one, never half of either.

Settings, the model library's list, saved benchmark runs, the GPU-crash marker,
the model-hash memo and the disk prefix store all write through it.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Write ``data`` (str is written as UTF-8) to ``path`` through a temporary file in the same
    folder, fsynced, then renamed over ``path``; the rename is made durable too (POSIX)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if hasattr(os, "O_DIRECTORY"):  # Windows has no directory fds
        dfd = os.open(path.parent, os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def move_aside(path: str | os.PathLike[str], reason: str = "corrupt") -> Path:
    """Rename a damaged file to ``<name>.<reason>-<timestamp>`` and return the new path.

    Damaged files are kept, never deleted: the user may want to recover them."""
    path = Path(path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.{reason}-{stamp}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.{reason}-{stamp}-{n}")
        n += 1
    os.replace(path, target)
    return target

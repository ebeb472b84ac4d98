"""Notices that Hearth stopped while a model was on a GPU, so the next start runs on the CPU.

A GPU that goes away (a driver reset, an eGPU unplugged, a laptop switching GPUs)
does not come back to Python as an error: llama.cpp's CUDA and Vulkan backends
abort the whole process. Restarting on the same GPU would often stop the same
way, over and over. So while layers are on a device a small marker file says so;
a clean close, an unload or a CPU load removes it; and a start that finds it
loads this once on the CPU and says why (the chats are in SQLite and survive).

The load (engine/loading/load.py) writes the marker just before a load that may
use a device, for the window and the command line alike; the window reads it at
start. The marker lives in the data folder the caller passes: a command-line
load and the window may share one, and a marker belongs to the process that
wrote it (its pid and start time).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..atomic import atomic_write

MARKER = "gpu-session.json"


def _started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None if there is none."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError, ValueError):
        return None


def _owner_alive(entry: dict[str, Any]) -> bool:
    """The process that wrote ``entry`` still runs (this one, or another Hearth on the same data
    folder); a pid that a new process took over since does not count (its start time differs)."""
    pid, started = entry.get("pid"), entry.get("started")
    if not isinstance(pid, int) or not isinstance(started, (int, float)):
        return False
    now = _started(pid)
    return now is not None and abs(now - started) < 1.0


class GpuGuard:
    """The marker in one data folder (``folder / MARKER``)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = Path(folder) / MARKER

    def _read(self) -> dict[str, Any] | None:
        try:
            entry = json.loads(self.path.read_text(encoding="utf-8"))
        except OSError:
            return None
        except ValueError:
            return {"phase": "running"}  # cut off by the stop itself
        return entry if isinstance(entry, dict) else {"phase": "running"}

    def mark(self, phase: str, **about: Any) -> None:
        """Say that a model is being loaded ("loading") or runs ("running") with layers on a device."""
        entry = {"phase": phase, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid": os.getpid(),
                 "started": _started(os.getpid()), **about}
        try:
            atomic_write(self.path, json.dumps(entry).encode("utf-8"))
        except OSError:
            pass  # a read-only data folder: the guard is a convenience, never a reason to fail a load

    def clear(self) -> None:
        """Nothing of this process is on a device any more (a CPU load, an unload, a clean close).
        Another running Hearth's marker stays."""
        entry = self._read()
        if entry is None or (entry.get("pid") != os.getpid() and _owner_alive(entry)):
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass

    def take(self) -> dict[str, Any] | None:
        """The marker an earlier run left (it stopped with a model on a device), removed; or None.
        A marker whose process still runs (this one, another Hearth) is not an earlier run's."""
        entry = self._read()
        if entry is None or _owner_alive(entry):
            return None
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
        return entry


def crash_text(entry: dict[str, Any]) -> str:
    """The sentence the window shows for a marker found at start."""
    where = entry.get("device") or "the GPU"
    what = entry.get("model") or "the model"
    doing = "was loading" if entry.get("phase") == "loading" else "was running"
    return (f"Hearth stopped unexpectedly last time while {what} {doing} on {where}. A GPU driver that "
            "resets or a GPU that goes away stops llama.cpp outright, so this time the model runs on the "
            "CPU; your chats are all here.")

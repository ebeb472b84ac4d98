"""Give back the calling thread's OpenMP workers, so that compute can move to another thread.

llama.cpp's CPU backend (built with OpenMP, as the Linux wheel is) and torch run
their kernels in ``omp parallel`` regions. libgomp gives every OS thread that
opens such a region a team of worker threads of its own, and keeps the team,
idle, for that thread's next region: it goes only when the thread exits. While
the threads of all teams outnumber the CPUs, libgomp switches every team to a
throttled wait (``gomp_throttled_spin_count_var``: its workers sleep between the
many barriers of a graph instead of spinning), which on 2 cores measured 28
tokens/s where one thread alone makes 88.

So a thread that has computed and hands the model to another (the window's
engine thread starting the local server's scheduler, the window starting a
benchmark on a worker thread) first calls :func:`release`: OpenMP 5's
``omp_pause_resource_all`` makes libgomp end the calling thread's team
(``gomp_pause_host``), and the next region on any thread builds a new one.
Nothing else changes: the call is a no-op where no libgomp is loaded, and it
must not be made from inside a parallel region (it never is: it runs between
replies).
"""
from __future__ import annotations

import ctypes
import os
import threading

OMP_PAUSE_SOFT = 1   # enum omp_pause_resource_t (omp.h): free the threads, keep what is cheap to keep

_lock = threading.Lock()
_libs: list[ctypes.CDLL] | None = None


def _loaded_libgomps() -> list[str]:
    """Paths of every libgomp this process has mapped (llama.cpp's, torch's own copy)."""
    paths: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rstrip("\n").partition("/")[2]
                if not path:
                    continue
                path = "/" + path
                if "libgomp" in os.path.basename(path) and path not in paths:
                    paths.append(path)
    except OSError:  # not Linux: no libgomp to worry about (macOS builds use no OpenMP)
        pass
    return paths


def _handles() -> list[ctypes.CDLL]:
    global _libs
    with _lock:
        found = _loaded_libgomps()
        known = {getattr(lib, "_name", "") for lib in _libs or []}
        libs = list(_libs or [])
        for path in found:
            if path in known:
                continue
            try:
                lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_LOCAL)
            except OSError:
                continue
            fn = getattr(lib, "omp_pause_resource_all", None)
            if fn is None:  # a libgomp older than GCC 9 has no pause; nothing to do
                continue
            fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
            libs.append(lib)
        _libs = libs
        return libs


def loaded() -> bool:
    """Whether an OpenMP runtime that can give threads back is in this process."""
    return bool(_handles())


def release() -> int:
    """End the calling thread's OpenMP teams (in every libgomp loaded); returns how many
    runtimes did so. Call it on a thread that has computed, before another thread starts to."""
    done = 0
    for lib in _handles():
        if lib.omp_pause_resource_all(OMP_PAUSE_SOFT) == 0:
            done += 1
    return done

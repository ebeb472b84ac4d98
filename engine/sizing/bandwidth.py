"""This machine's memory read bandwidth, measured: the roofline that doctor and the
Performance panel hold a decode step against."""
from __future__ import annotations

import threading
import time

import numpy as np


def measure_read_bandwidth(n_threads: int, mib: int = 512, repeats: int = 3) -> float:
    """Memory bandwidth in bytes/s: n_threads threads copy disjoint slices of a
    buffer far larger than any cache; a copy reads and writes each byte."""
    src = np.ones(mib * 1024 * 1024 // 8, dtype=np.float64)
    dst = np.empty_like(src)
    parts = np.array_split(np.arange(src.size), n_threads)
    bounds = [(p[0], p[-1] + 1) for p in parts if len(p)]

    def work(lo: int, hi: int) -> None:
        np.copyto(dst[lo:hi], src[lo:hi])  # numpy releases the GIL here

    best = float("inf")
    for _ in range(repeats):
        ts = [threading.Thread(target=work, args=b) for b in bounds]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best

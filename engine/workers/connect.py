"""Opening a machine: its worker probed directly, or started over SSH first; and the link measured."""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from ..backends.llama.rpc import probe_worker, worker_memory
from ..errors import HearthError
from .machines import Link, WorkerMachine
from .ssh import open_ssh


def round_trip_ms(endpoint: str, n: int = 5) -> float:
    """The median time of ``n`` HELLOs to the worker at ``endpoint`` (each a new connection: an upper bound
    of a call on the open one)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        probe_worker(endpoint)
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def open_machine(machine: WorkerMachine, data_dir: Path | None, *, timeout: float = 60.0) -> Link:
    """Reach ``machine``'s worker: probe it directly, or over SSH start it and forward its port first."""
    if machine.ssh:
        link = open_ssh(machine, data_dir, timeout=timeout)
    else:
        probe_worker(machine.address)
        link = Link(machine, machine.address)
    try:
        link.round_trip_ms = round_trip_ms(link.endpoint)
        link.memory = worker_memory(link.endpoint)
    except HearthError:
        link.close()
        raise
    return link


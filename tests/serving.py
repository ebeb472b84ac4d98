"""A local server for tests: a scheduler over an engine, served on an ephemeral 127.0.0.1 port."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from engine.serve.scheduler import Scheduler
from engine.serve.server import LocalServer


@contextmanager
def local_server(engine, **scheduler_kw) -> Iterator[LocalServer]:
    """A started LocalServer serving ``engine`` through a new Scheduler(**scheduler_kw);
    stopped, and the scheduler closed, on exit (the engine stays open)."""
    sched = Scheduler(engine, **scheduler_kw)
    srv = LocalServer(port=0)
    srv.attach(sched)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        sched.close()

"""A local server for tests: a scheduler over an engine, served on an ephemeral 127.0.0.1 port."""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from engine.backends.llama.backend import LlamaCppBackend
from engine.engine import Engine
from engine.models.gguf import model_info
from engine.serve.scheduler import Scheduler
from engine.serve.server import LocalServer


@contextmanager
def local_server(engine, *, pool=None, **scheduler_kw) -> Iterator[LocalServer]:
    """A started LocalServer serving ``engine`` through a new Scheduler(**scheduler_kw) (and with
    ``pool``, the library's models); stopped, and the scheduler closed, on exit (the engine stays open)."""
    sched = Scheduler(engine, **scheduler_kw)
    srv = LocalServer(port=0, pool=pool)
    srv.attach(sched)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        sched.close()


QWEN = (Path(__file__).parent / "fixtures" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()


@contextmanager
def qwen_tool_engine(bundled_path, n_ctx: int = 4096) -> Iterator[Engine]:
    """The bundled model wearing Qwen 2.5's real chat template (Hermes ``<tool_call>`` syntax),
    as if its GGUF carried it: a model that takes tools."""
    info = dataclasses.replace(model_info(bundled_path), chat_template=QWEN)
    e = Engine(LlamaCppBackend(bundled_path, n_ctx=n_ctx, n_threads=2, info=info))
    try:
        yield e
    finally:
        e.close()

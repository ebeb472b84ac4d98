"""``python -m engine bench server``: what the local server costs a streamed reply.

The same greedy request three ways, alternated round by round so the machine's
noise falls on all of them alike:
- ``in_process``: ``Engine.stream`` called directly;
- ``scheduler``: through a Scheduler ticket, in this process (no HTTP);
- ``api_stream``: a real HTTP client streaming /v1/chat/completions (SSE) from
  the LocalServer on 127.0.0.1, over that scheduler.
Each row's decode rate is measured where its caller sees the text: between
the first and the last text delta (or SSE chunk) to arrive. The target is
``api_stream / in_process >= 0.95`` (llama-cpp-python's own server was measured
at about half of native, llama-cpp-python#1452).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Iterable

import httpx

from ..engine import Engine
from ..config import EngineConfig
from ..serve import Scheduler, ServeRequest
from ..serve.http.server import LocalServer
from ..prompt.messages import Message
from ..types import SamplingParams

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."
TARGET = 0.95


def _rate(arrivals: Iterable[float]) -> tuple[float, int]:
    """Deltas per second between the first and the last arrival, and how many arrived."""
    ts = list(arrivals)
    if len(ts) < 2 or ts[-1] <= ts[0]:
        return 0.0, len(ts)
    return (len(ts) - 1) / (ts[-1] - ts[0]), len(ts)


def _in_process(engine: Engine, params: SamplingParams) -> tuple[float, int]:
    return _rate(time.perf_counter() for ev in engine.stream([Message("user", PROMPT)], params)
                 if ev.kind == "delta" and ev.text)


def _scheduled(scheduler: Scheduler, params: SamplingParams) -> tuple[float, int]:
    ticket = scheduler.submit(ServeRequest(messages=[Message("user", PROMPT)], params=params))
    return _rate(time.perf_counter() for ev in ticket.events() if ev.kind == "delta" and ev.text)


def _api(client: httpx.Client, model: str, tokens: int) -> tuple[float, int]:
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": tokens,
            "temperature": 0, "stream": True}
    arrivals = []
    with client.stream("POST", "/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:])["choices"]
                if choices and choices[0]["delta"].get("content"):
                    arrivals.append(time.perf_counter())
    return _rate(arrivals)


def bench_server(a: argparse.Namespace) -> dict:
    """Median decode rate of each way over ``a.rounds`` rounds of ``a.tokens`` tokens, and the ratios."""
    engine = Engine.open(EngineConfig(a.model, n_ctx=a.ctx or 2048, n_threads=a.threads))
    params = SamplingParams(temperature=0.0, max_tokens=a.tokens)
    server = LocalServer(port=0)
    rows: dict[str, list[float]] = {"in_process": [], "scheduler": [], "api_stream": []}
    deltas: dict[str, int] = {}

    def record(name: str, measured: tuple[float, int]) -> None:
        rows[name].append(measured[0])
        deltas[name] = measured[1]

    try:
        server.start()
        with httpx.Client(base_url=server.url, timeout=600) as client:
            for _ in range(max(1, a.rounds)):
                record("in_process", _in_process(engine, params))
                # A scheduler drives the engine itself, so it is open only for its own rows.
                scheduler = Scheduler(engine, parallel=1)
                try:
                    server.attach(scheduler)
                    record("scheduler", _scheduled(scheduler, params))
                    record("api_stream", _api(client, server.model_id or "", a.tokens))
                finally:
                    server.detach("between benchmark rounds")
                    scheduler.close()
    finally:
        server.stop()
        engine.close()
    med = {k: statistics.median(v) for k, v in rows.items()}
    ref = med["in_process"] or 1.0
    return {"bench": "server", "model": engine.model.label if engine.model else "model", "tokens": a.tokens,
            "rounds": a.rounds, "decode_deltas_per_s": {k: round(v, 2) for k, v in med.items()},
            "deltas": deltas, "ratio_scheduler": round(med["scheduler"] / ref, 3),
            "ratio_api_stream": round(med["api_stream"] / ref, 3), "target_api_stream": TARGET,
            "meets_target": med["api_stream"] / ref >= TARGET,
            "runs": {k: [round(x, 2) for x in v] for k, v in rows.items()}}

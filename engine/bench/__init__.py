"""Benchmarks, one module each, run as ``python -m engine bench NAME``.

Each runs its reference side by side in the same process and reports ratios,
because absolute times on shared machines are noisy. A benchmark's entry point,
``bench_NAME(args)`` in its module (MODULES), returns one JSON-able dict.
"""
from __future__ import annotations

import argparse
import importlib

# The command's name -> its module (engine/bench/<module>.py).
MODULES = {"overhead": "overhead", "prefix": "prefix", "speculative": "speculative", "sizing": "sizing", "hf": "hf",
           "quality": "quality", "stop": "stop", "soak": "soak", "tune": "tune_model", "server": "api_cost",
           "serve": "concurrency", "threads": "threads", "handover": "handover", "documents": "documents",
           "tools": "tools", "images": "images", "agents": "agents", "speed": "speed", "remote": "remote",
           "rpc": "rpc", "voice": "voice", "long-chat": "long_chat"}
NAMES = tuple(MODULES)
TOKENS = 256  # ``--tokens`` when it is not given...
OWN_TOKENS = {"serve"}  # ...except where a benchmark chooses per row (each row's default in its module)


def bench_tokens(which: str, given: int | None) -> int | None:
    """``--tokens`` as benchmark ``which`` reads it: as given, else the one default (None where it chooses)."""
    return given if given is not None or which in OWN_TOKENS else TOKENS


def run_benchmark(which: str, a: argparse.Namespace) -> dict:
    """Run the benchmark ``which``: ``bench_<which>`` in its module."""
    if which not in MODULES:
        raise ValueError(f"unknown benchmark {which!r}; choose one of {', '.join(NAMES)}")
    if hasattr(a, "tokens"):
        a.tokens = bench_tokens(which, a.tokens)
    return getattr(importlib.import_module(f".{MODULES[which]}", __package__), f"bench_{which.replace('-', '_')}")(a)

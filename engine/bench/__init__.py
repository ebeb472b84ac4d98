"""Benchmarks, one module each, run as ``python -m engine bench NAME``.

Each runs its reference side by side in the same process and reports ratios,
because absolute times on shared machines are noisy. A module's ``run(args)``
returns one JSON-able dict.
"""
from __future__ import annotations

import argparse
import importlib

NAMES = ("overhead", "prefix", "speculative", "sizing", "hf", "quality", "stop", "soak", "tune", "server", "serve",
         "threads", "handover", "documents", "tools", "images")


def run(which: str, a: argparse.Namespace) -> dict:
    """Run the benchmark module ``engine.bench.<which>``."""
    if which not in NAMES:
        raise ValueError(f"unknown benchmark {which!r}; choose one of {', '.join(NAMES)}")
    return importlib.import_module(f".{which}", __package__).run(a)

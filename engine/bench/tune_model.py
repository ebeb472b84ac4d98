"""``python -m engine bench tune``: a baseline, then one change at a time (engine/tuning).

Every run is saved as JSON (``--out FILE``, or under the app's data folder);
``--csv FILE`` also writes the rows as CSV; ``--compare FILE`` adds per-row
changes against an earlier saved run.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..tuning import report, run_tune


def bench_tune(a: argparse.Namespace) -> dict:
    old = report.load_run(a.compare) if getattr(a, "compare", None) else None  # a bad file fails before the run
    rows = [r.strip() for r in (getattr(a, "rows", None) or "").split(",") if r.strip()]

    def show(done: int, total: int, name: str) -> None:
        if name:
            print(f"bench tune: row {done + 1}/{total}: {name}", file=sys.stderr, flush=True)

    result = run_tune(a.model, prompts=getattr(a, "prompts", None) or 4, tokens=a.tokens,
                      ppl_tokens=getattr(a, "ppl_tokens", None) or 512, threads=a.threads,
                      n_ctx=a.ctx or 2048, only=rows or None, progress=show)
    if old is not None:
        result["compare"] = {"against": str(a.compare), "created": old.get("created"),
                             "rows": report.compare_runs(old, result)}
    result["saved"] = str(report.save(result, getattr(a, "out", None)))
    if getattr(a, "csv", None):
        Path(a.csv).write_text(report.to_csv(result), encoding="utf-8")
    return result

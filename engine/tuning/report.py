"""Judging, saving and comparing tune runs: the noise, "worse", the best row, CSV/JSON.

The noise is the spread between the baseline and its repeat at the end of the
same run. A row is worse when a time is slower than the baseline by more than
that spread (never less than ``MIN_NOISE``), when it needs more memory, or
when perplexity rises; lower greedy agreement is shown, not judged, because
any kernel change may move a near-tie.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from ..atomic import atomic_write
from .rows import BASELINE, BASELINE_AGAIN

MIN_NOISE = 0.05        # a 5% difference or less is never called worse, however quiet the run
MEMORY_SLACK = 0.01     # buffers are exact; 1% covers rounding in llama.cpp's MiB lines
PPL_SLACK = 0.002       # relative perplexity rise that counts as a quality loss
AGREEMENT_FOR_BEST = 0.95
# Higher is better for tok_s; lower for the rest.
TIMES = ("ttft_ms", "tpot_ms", "tok_s")
CSV_COLUMNS = ("name", "change", "status", "ttft_ms", "tpot_ms", "tok_s", "memory_bytes", "rss_bytes",
               "perplexity", "agreement", "prefix_tokens", "acceptance", "cached_tokens", "exactness",
               "worse", "seconds")


def noise(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Relative spread of each time between the baseline and its repeat."""
    a = next(r for r in rows if r["name"] == BASELINE)
    b = next((r for r in rows if r["name"] == BASELINE_AGAIN and r["status"] == "measured"), None)
    out = {}
    for k in TIMES:
        lo = min(a[k], b[k]) if b else a[k]
        out[k] = round(abs(a[k] - b[k]) / lo, 4) if b and lo > 0 else 0.0
    return out


def judge(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mark each measured row's ``worse`` reasons against the first baseline; return the noise."""
    spread = noise(rows)
    base = next(r for r in rows if r["name"] == BASELINE)
    for r in rows:
        if r["status"] != "measured" or r["name"] == BASELINE_AGAIN:
            continue  # the repeat defines the noise; it is not judged against it
        why = []
        for k in TIMES:
            limit = max(spread[k], MIN_NOISE)
            change = _rel(r[k], base[k])
            if (k == "tok_s" and change < -limit) or (k != "tok_s" and change > limit):
                why.append(f"{k} {change:+.0%}")
        if r["memory_bytes"] > base["memory_bytes"] * (1 + MEMORY_SLACK):
            why.append(f"memory {_rel(r['memory_bytes'], base['memory_bytes']):+.0%}")
        if r["perplexity"] > base["perplexity"] * (1 + PPL_SLACK):
            why.append(f"perplexity {r['perplexity']:.3f} vs {base['perplexity']:.3f}")
        r["worse"] = why
    return spread


def best(rows: list[dict[str, Any]], tokens: int) -> str | None:
    """The fastest reply (TTFT + every step) among rows a setting can carry that are
    not worse and keep greedy agreement; the baseline when nothing beats it."""
    def reply_ms(r: dict[str, Any]) -> float:
        return r["ttft_ms"] + r["tpot_ms"] * (tokens - 1)

    ok = [r for r in rows if r["status"] == "measured" and r.get("settings") and not r.get("worse")
          and r["name"] != BASELINE_AGAIN and r.get("agreement", 0) >= AGREEMENT_FOR_BEST]
    return min(ok, key=reply_ms)["name"] if ok else None


def _rel(x: float, ref: float) -> float:
    return (x - ref) / ref if ref else 0.0


def results_dir() -> Path:
    """Where runs are saved: ``tune/`` in the app's data folder (HEARTH_DATA_DIR when set)."""
    from ..paths import data_dir

    return data_dir() / "tune"


def _stem(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).stem)[:60] or "model"


def save(result: dict[str, Any], out: str | os.PathLike[str] | None = None) -> Path:
    """Write ``result`` as JSON (to ``out``, or a new file under :func:`results_dir`)."""
    if out is None:
        folder = results_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"tune-{_stem(result['path'])}-{time.strftime('%Y%m%d-%H%M%S')}.json"
        n = 1
        while path.exists():
            path = path.with_name(f"{path.stem}-{n}.json")
            n += 1
    else:
        path = Path(out)
    atomic_write(path, json.dumps(result, indent=2) + "\n")
    return path


def load_run(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A saved run; a file that is not one gets a clear error."""
    from ..errors import HearthError

    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HearthError(f"cannot read the tune run {path}: {e}") from None
    if not isinstance(d, dict) or not isinstance(d.get("rows"), list) or d.get("kind") != "tune":
        raise HearthError(f"{path} is not a saved `bench tune` run")
    return d


def last_run(model_path: str, before: str | os.PathLike[str] | None = None) -> Path | None:
    """The newest saved run for ``model_path`` (other than ``before``), or None."""
    folder = results_dir()
    if not folder.is_dir():
        return None
    skip = Path(before).resolve() if before else None
    real = os.path.realpath(model_path)
    for p in sorted(folder.glob("tune-*.json"), key=lambda q: q.stat().st_mtime, reverse=True):
        if skip is not None and p.resolve() == skip:
            continue
        try:
            if os.path.realpath(str(load_run(p).get("path"))) == real:  # the same file, reached another way
                return p
        except Exception:  # a damaged file: skip it, the others still count
            continue
    return None


def compare_runs(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-row relative change from ``old`` to ``new`` (rows measured in both)."""
    before = {r["name"]: r for r in old["rows"] if r["status"] == "measured"}
    out = []
    for r in new["rows"]:
        o = before.get(r["name"])
        if o is None or r["status"] != "measured":
            continue
        d: dict[str, Any] = {"name": r["name"]}
        for k in (*TIMES, "memory_bytes", "perplexity"):
            d[k] = round(_rel(r[k], o[k]), 4)
        d["agreement"] = round(r["agreement"] - o["agreement"], 4)
        out.append(d)
    return out


def to_csv(result: dict[str, Any]) -> str:
    """The rows as CSV (one line each; reasons joined with "; ")."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in result["rows"]:
        w.writerow({**r, "worse": "; ".join(r.get("worse") or ()), "change": r.get("absent") or r["change"]})
    return buf.getvalue()


def profile_difference(model_path: str) -> str | None:
    """The measured exact-vs-fast difference from the newest saved run for
    ``model_path`` (the Settings choice shows it), or None without one."""
    p = last_run(model_path)
    if p is None:
        return None
    run = load_run(p)
    by = {r["name"]: r for r in run["rows"] if r["status"] == "measured"}
    base, fast = by.get(BASELINE), by.get("fast kernels")
    if base is None or fast is None:
        return None
    return (f"Measured here ({run['created']}): fast gives TTFT {_rel(fast['ttft_ms'], base['ttft_ms']):+.0%}, "
            f"tok/s {_rel(fast['tok_s'], base['tok_s']):+.0%}, and {fast['agreement']:.0%} of greedy tokens "
            f"the same as exact (noise ±{max(run['noise']['ttft_ms'], MIN_NOISE):.0%}).")

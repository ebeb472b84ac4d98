"""Paired speed ratios, and how sure a run can be of them.

A benchmark on a shared machine sees the machine's speed drift by 10-20% within a minute and
single measurements swing by a third. ``paired`` divides each of a side's figures by the
reference's from the same round (seconds apart) and takes the median; ``median_ci`` says where
the true median lies, distribution-free (order statistics, so one wild round moves nothing),
and ``verdict`` reads a bar against that interval: "met" only when the interval's low end is
at or over the bar, "not met" only when its high end is under it, and otherwise "within
noise": this run cannot tell, and more rounds (or a quieter machine) can. Fewer than 5 rounds
cannot say anything at 90%, and the verdict says so.
"""
from __future__ import annotations

import math
import statistics
from typing import Any

CI_LEVEL = 0.90


def median_ci(xs: list[float], level: float = CI_LEVEL) -> tuple[float, float, float]:
    """An interval that holds the median of what ``xs`` were drawn from with probability
    ``coverage`` >= ``level``: the k-th smallest and k-th largest of ``xs``, k as large as the
    level allows (the binomial sign test's interval). Too few values for the level (fewer than 5
    at 90%): the whole range, with the coverage it has. Returns (low, high, coverage)."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return 0.0, 0.0, 0.0

    def coverage(k: int) -> float:  # P(x_(k) <= median <= x_(n+1-k)) = 1 - 2 P(Binomial(n, 1/2) <= k-1)
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return s[k - 1], s[n - k], coverage(k)


def verdict(low: float, high: float, bar: float, coverage: float = 1.0, level: float = CI_LEVEL) -> str:
    """A bar read against an interval: "met", "not met" or "within noise" (the interval straddles it);
    "too few rounds" where the interval covers less than ``level`` (fewer than 5 rounds at 90%)."""
    if coverage < level:
        return "too few rounds"
    if low >= bar:
        return "met"
    if high < bar:
        return "not met"
    return "within noise"


def at_most(low: float, high: float, bar: float, coverage: float = 1.0, level: float = CI_LEVEL) -> str:
    """``verdict`` for a ratio that should stay at or under ``bar`` (a latency's): "met" only when the whole
    interval is at or under it, "not met" only when the whole interval is over it."""
    if coverage < level:
        return "too few rounds"
    if high <= bar:
        return "met"
    if low > bar:
        return "not met"
    return "within noise"


def paired(values: list[float], ref: list[float], level: float = CI_LEVEL) -> dict[str, Any]:
    """A side against the reference measured next to it: the median of the per-round ratios, their
    least and greatest, and ``median_ci``'s interval (``ci``, with its ``coverage``). Pairing cancels
    what drifts between rounds (another tenant of a virtual machine, the clock), which a ratio of two
    medians keeps."""
    ratios = sorted(v / r for v, r in zip(values, ref) if r > 0)
    if not ratios:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "ci": [0.0, 0.0], "coverage": 0.0}
    lo, hi, cov = median_ci(ratios, level)
    return {"median": round(statistics.median(ratios), 3), "min": round(ratios[0], 3), "max": round(ratios[-1], 3),
            "ci": [round(lo, 3), round(hi, 3)], "coverage": round(cov, 3)}


def bracket(before: list[float], after: list[float]) -> list[float]:
    """The reference at the moment of a measurement taken between two of its runs, round by round:
    their mean. Against one run of the reference a drift through the round reads as the side's;
    against the two that bracket it, a steady drift cancels and the reference's own jitter halves."""
    return [(a + b) / 2 for a, b in zip(before, after)]


def versus(got: dict[str, dict[str, list[float]]], ref: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Every side in ``got`` (side -> test -> its figures, round by round) but ``ref``, each test
    ``paired`` with ``ref``'s figures of the same rounds."""
    return {name: {t: paired(v, got[ref][t]) for t, v in tests.items()} for name, tests in got.items() if name != ref}


def columns(pairs: dict[str, dict[str, Any]], key: str) -> dict[str, Any]:
    """One side's ``paired`` ratios, test by test, as a report's columns: ``key`` (the medians),
    ``key``_range (least, greatest), ``key``_ci (the 90% interval) and ``ci_coverage``."""
    return {key: {t: p["median"] for t, p in pairs.items()},
            f"{key}_range": {t: [p["min"], p["max"]] for t, p in pairs.items()},
            f"{key}_ci": {t: p["ci"] for t, p in pairs.items()},
            "ci_coverage": min((p["coverage"] for p in pairs.values()), default=0.0)}


def run_order(names: list[str], r: int) -> list[str]:
    """Round ``r``'s order: ``names`` (the reference first) in even rounds, turned round in odd ones,
    so that each side runs as often after the reference as before it."""
    return names if r % 2 == 0 else names[::-1]

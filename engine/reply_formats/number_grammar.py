"""Numbers with bounds as grammar: an integer's range exactly, a number's sign where it can.

An integer's ``minimum``/``maximum`` (and the exclusive forms) become digit rules that accept
exactly the integers in the range, written as JSON writes them (no leading zeros, one minus
sign): the range is cut into pieces whose numbers share their length and a prefix, each piece
a row of digit classes (``1[0-5]``, ``[2-9][0-9]``...). A number's bounds cannot be written
this way in general; the grammar keeps a nonnegative number nonnegative, and the validator
checks the rest.
"""
from __future__ import annotations

import math
from typing import Any

MAX_DIGITS = 16
MAX_INT = 10 ** MAX_DIGITS - 1   # what the grammar's plain integers reach too


class BoundsError(ValueError):
    """Bounds that no integer satisfies, or that are not numbers."""


def integer_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """The smallest and largest integer ``schema`` allows (None: unbounded), from ``minimum``,
    ``maximum``, ``exclusiveMinimum`` and ``exclusiveMaximum`` (JSON Schema 2019+ numbers, or
    draft 4's booleans beside ``minimum``/``maximum``)."""
    lo = hi = None
    for key, up in (("minimum", False), ("maximum", True), ("exclusiveMinimum", False), ("exclusiveMaximum", True)):
        v = schema.get(key)
        if v is None or isinstance(v, bool):
            continue
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            raise BoundsError(f"{key} must be a number, got {v!r}")
        exclusive = key.startswith("exclusive") or schema.get("exclusive" + key[0].upper() + key[1:]) is True
        if up:
            bound = (math.ceil(v) - 1 if exclusive else math.floor(v))
            hi = bound if hi is None else min(hi, bound)
        else:
            bound = (math.floor(v) + 1 if exclusive else math.ceil(v))
            lo = bound if lo is None else max(lo, bound)
    if lo is not None and hi is not None and lo > hi:
        raise BoundsError(f"no integer is at least {lo} and at most {hi}")
    return lo, hi


def integer_rule(lo: int | None, hi: int | None) -> str:
    """A GBNF expression for exactly the integers in ``[lo, hi]`` (None: as far as the grammar's
    integers go), as JSON writes them."""
    lo = -MAX_INT if lo is None else max(lo, -MAX_INT)
    hi = MAX_INT if hi is None else min(hi, MAX_INT)
    if lo > hi:
        raise BoundsError(f"no integer the grammar can write is at least {lo} and at most {hi}")
    alts = []
    if lo < 0:
        neg_lo, neg_hi = max(1, -hi), -lo  # the magnitudes of the negative part
        if neg_lo <= neg_hi:
            alts.append(f'"-" ({_nonnegative(neg_lo, neg_hi)})')
    if hi >= 0:
        alts.append(_nonnegative(max(0, lo), hi))
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def nonnegative_number() -> str:
    """Any number JSON writes without a minus sign."""
    return f'("0" | [1-9] [0-9]{{0,{MAX_DIGITS - 1}}}) ("." [0-9]{{1,16}})? ([eE] [-+]? [0-9]{{1,3}})?'


def _nonnegative(lo: int, hi: int) -> str:
    return " | ".join(_piece(str(a), str(b)) for a, b in _pieces(lo, hi))


def _pieces(lo: int, hi: int) -> list[tuple[int, int]]:
    """``[lo, hi]`` cut where the numbers' length or shared prefix changes: each piece runs from
    ``a`` to ``b`` of the same length, equal up to one digit, then 0...0 to 9...9."""
    stops = {hi}
    nines = 1
    stop = _fill_nines(lo, nines)
    while lo <= stop < hi:
        stops.add(stop)
        nines += 1
        stop = _fill_nines(lo, nines)
    zeros = 1
    stop = _fill_zeros(hi + 1, zeros) - 1
    while lo < stop <= hi:
        stops.add(stop)
        zeros += 1
        stop = _fill_zeros(hi + 1, zeros) - 1
    out, start = [], lo
    for stop in sorted(stops):
        out.append((start, stop))
        start = stop + 1
    return out


def _fill_nines(n: int, count: int) -> int:
    s = str(n)
    return int(s[:-count] + "9" * count) if count < len(s) else int("9" * count)


def _fill_zeros(n: int, count: int) -> int:
    return n - n % 10 ** count


def _piece(a: str, b: str) -> str:
    """Digit classes from ``a`` to ``b`` (same length; equal, then one range, then [0-9]s)."""
    out = []
    for x, y in zip(a, b):
        out.append(f'"{x}"' if x == y else f"[{x}-{y}]")
    return " ".join(out)

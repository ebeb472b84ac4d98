"""Prometheus' text exposition format (version 0.0.4), written by hand: the server needs no client library.

A family is a name, a type, a help line and samples; a sample is a name (the family's, or
its ``_bucket`` / ``_sum`` / ``_count`` / ``_total`` form), labels and a value. Counters
are written the way prometheus_client writes them: the family, its HELP and its TYPE all
named with ``_total``, as llama-server and vLLM expose theirs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

Labels = Mapping[str, str]
BACKSLASH, NEWLINE = "\\", "\n"


@dataclass(slots=True)
class MetricFamily:
    """One metric family: ``kind`` is counter, gauge or histogram."""
    name: str
    kind: str
    help: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)

    def add(self, value: float, labels: Labels | None = None, suffix: str = "") -> None:
        self.samples.append((self.name + suffix, dict(labels or {}), value))

    def histogram(self, bounds: Sequence[float], counts: Sequence[int], total: float,
                  labels: Labels | None = None) -> None:
        """The cumulative ``_bucket`` lines (``+Inf`` last), then ``_count`` and ``_sum``; ``counts[i]``
        is the observations in bucket i alone (the last one above every bound). Bounds are written
        as prometheus_client writes them (``le="2.0"``), so a query made for vLLM's matches."""
        base = dict(labels or {})
        running = 0
        for bound, n in zip([*bounds, math.inf], counts):
            running += n
            self.add(running, {**base, "le": "+Inf" if math.isinf(bound) else repr(float(bound))}, "_bucket")
        self.add(running, base, "_count")
        self.add(total, base, "_sum")


def escape_label(value: str) -> str:
    """A label value as the format quotes it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def sample_value(value: float) -> str:
    """A sample value: integers without a fraction, ``+Inf`` / ``-Inf`` / ``NaN`` as Go writes them."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def exposition_text(families: Iterable[MetricFamily]) -> str:
    """The text a scrape reads: each family's HELP and TYPE lines, then its samples."""
    lines: list[str] = []
    for f in families:
        lines.append(f"# HELP {f.name} {f.help.replace(BACKSLASH, BACKSLASH * 2).replace(NEWLINE, BACKSLASH + 'n')}")
        lines.append(f"# TYPE {f.name} {f.kind}")
        for name, labels, value in f.samples:
            tags = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{tags}}} {sample_value(value)}" if tags else f"{name} {sample_value(value)}")
    return "\n".join(lines) + "\n"

"""The server's last minutes, summed up for the window's Server panel: counts, percentiles, the queue and the KV.

``summarize`` turns the finished requests and gauge samples of a time span (metrics.py
keeps them) into a :class:`MetricsWindow`: totals and p50/p99 over the span, the span cut
into buckets for the charts, and each API key's use. Percentiles interpolate linearly
between the two nearest values, as numpy's default does (decode/metrics.py's
``percentile``); a figure with no observation in the span is None, never 0.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..decode.metrics import percentile

if TYPE_CHECKING:
    from .request_record import FinishedRequest


@dataclass(frozen=True, slots=True)
class GaugeSample:
    """The gauges at one moment (``at``: the registry's clock, seconds)."""
    at: float
    running: int
    waiting: int
    kv_used_tokens: int
    kv_capacity_tokens: int  # 0: not known

    @property
    def kv_fraction(self) -> float | None:
        return self.kv_used_tokens / self.kv_capacity_tokens if self.kv_capacity_tokens else None


@dataclass(frozen=True, slots=True)
class KeyUse:
    """One API key's requests in the span."""
    name: str
    key_id: str
    requests: int
    prompt_tokens: int
    generated_tokens: int
    last_ago_s: float  # how long ago its last request ended


@dataclass(frozen=True, slots=True)
class WindowBucket:
    """One slice of the span: ``start_ago_s`` and ``end_ago_s`` count back from now (start > end)."""
    start_ago_s: float
    end_ago_s: float
    requests: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p99_s: float | None


@dataclass(frozen=True, slots=True)
class MetricsWindow:
    """The span's figures; ``samples`` oldest first, ``buckets`` oldest first."""
    span_s: float
    now: float
    requests: int
    finish_reasons: dict[str, int]
    priorities: dict[str, int]
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p99_s: float | None
    queue_p50_s: float | None
    queue_p99_s: float | None
    prompt_tokens: int
    cached_tokens: int
    generated_tokens: int
    prefix_hit_rate: float | None  # cached / prompt tokens
    spec_acceptance: float | None  # accepted / drafted tokens
    keys: tuple[KeyUse, ...]
    samples: tuple[GaugeSample, ...]
    buckets: tuple[WindowBucket, ...]

    @property
    def latest(self) -> GaugeSample | None:
        """The newest gauge sample in the span."""
        return self.samples[-1] if self.samples else None

    @property
    def waiting_p99(self) -> float | None:
        """The queue's length at its 99th percentile over the span's samples."""
        return _pct([float(s.waiting) for s in self.samples], 99)


def _pct(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def _pcts(values: list[float]) -> tuple[float | None, float | None]:
    return _pct(values, 50), _pct(values, 99)


def summarize(recent: Sequence[tuple[float, "FinishedRequest"]], samples: Sequence[GaugeSample], span_s: float,
              now: float, n_buckets: int) -> MetricsWindow:
    """The window over ``recent`` ((when it ended, the request)) and ``samples``, all inside the span."""
    done = [d for _t, d in recent]
    ttft = [d.ttft_s for d in done if d.ttft_s is not None]
    tpot = [d.tpot_s for d in done if d.tpot_s is not None]
    prompt = sum(d.prompt_tokens for d in done)
    cached = sum(d.cached_tokens for d in done)
    drafted = sum(d.drafted for d in done)
    accepted = sum(d.accepted for d in done)
    return MetricsWindow(
        span_s=span_s, now=now, requests=len(done),
        finish_reasons=dict(Counter(d.finish_reason for d in done)), priorities=dict(Counter(d.priority for d in done)),
        ttft_p50_s=_pct(ttft, 50), ttft_p99_s=_pct(ttft, 99), tpot_p50_s=_pct(tpot, 50), tpot_p99_s=_pct(tpot, 99),
        e2e_p50_s=_pct([d.e2e_s for d in done], 50), e2e_p99_s=_pct([d.e2e_s for d in done], 99),
        queue_p50_s=_pct([d.queue_s for d in done], 50), queue_p99_s=_pct([d.queue_s for d in done], 99),
        prompt_tokens=prompt, cached_tokens=cached, generated_tokens=sum(d.generated_tokens for d in done),
        prefix_hit_rate=cached / prompt if prompt else None, spec_acceptance=accepted / drafted if drafted else None,
        keys=_keys(recent, now), samples=tuple(samples), buckets=_buckets(recent, span_s, now, n_buckets))


def _keys(recent: Sequence[tuple[float, "FinishedRequest"]], now: float) -> tuple[KeyUse, ...]:
    use: dict[tuple[str, str], list[float]] = {}
    for t, d in recent:
        if d.key is None:
            continue
        u = use.setdefault((d.key, d.key_id or ""), [0, 0, 0, t])
        u[0] += 1
        u[1] += d.prompt_tokens
        u[2] += d.generated_tokens
        u[3] = max(u[3], t)
    rows = [KeyUse(name, kid, int(u[0]), int(u[1]), int(u[2]), now - u[3]) for (name, kid), u in use.items()]
    return tuple(sorted(rows, key=lambda k: (-k.requests, k.name, k.key_id)))


def _buckets(recent: Sequence[tuple[float, "FinishedRequest"]], span_s: float, now: float,
             n: int) -> tuple[WindowBucket, ...]:
    n = max(1, n)
    width = span_s / n
    slices: list[list["FinishedRequest"]] = [[] for _ in range(n)]
    for t, d in recent:
        i = int((t - (now - span_s)) / width) if width > 0 else n - 1
        slices[min(max(i, 0), n - 1)].append(d)  # a request ending exactly now belongs to the last slice
    out = []
    for i, part in enumerate(slices):
        ttft = _pcts([d.ttft_s for d in part if d.ttft_s is not None])
        tpot = _pcts([d.tpot_s for d in part if d.tpot_s is not None])
        out.append(WindowBucket(span_s - i * width, span_s - (i + 1) * width, len(part), *ttft, *tpot))
    return tuple(out)

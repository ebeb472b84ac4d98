"""The server's figures over time: every finished request, the queue and the KV, for ``/metrics`` and the Server panel.

One :class:`ServerMetrics` per server, Qt-free and thread-safe. Whoever ends a request
calls :meth:`ServerMetrics.record` with a :class:`FinishedRequest` (today the HTTP server
where a ticket is released, and the window's reply through the scheduler); the gauges
(requests running and waiting, the KV in use) are read at scrape time from a callable the
server passes in, returning a plain dict. ``exposition()`` is the Prometheus text of
``GET /metrics``; ``window(span_s)`` (metrics_window.py) is the last minutes for the
window's Server panel, computed here so that the panel only draws.

The names are ``hearth:`` with vLLM's suffixes where vLLM has the figure, and
llama-server's where only it has one (docs/api.md says which peer each one matches); the
histograms' buckets are vLLM's, so a dashboard made for vLLM reads these as they are.
"""
from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import Counter, deque
from typing import Callable, Mapping

from .exposition import MetricFamily, exposition_text
from .metrics_window import GaugeSample, MetricsWindow, summarize
from .request_record import FinishedRequest

# vLLM's buckets (vllm/v1/metrics/loggers.py), in seconds.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)
PRIORITIES = ("window", "interactive", "background")  # the classes a request is served in, first first
HISTORY_S = 15 * 60.0     # how far back the Server panel can look
MAX_RECENT = 50_000       # finished requests kept for it at most (a flood cannot grow memory without bound)

Gauges = Callable[[], Mapping[str, float]]
PREFIX = "hearth:"


class _Histogram:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # a value on a bound belongs to it (le)
        self.total += value


_HISTOGRAMS = {  # name: (buckets, help, the FinishedRequest field observed)
    "time_to_first_token_seconds": (TTFT_BUCKETS, "Histogram of time to first token in seconds (queue included).",
                                    "ttft_s"),
    "request_time_per_output_token_seconds": (TPOT_BUCKETS, "Histogram of each request's mean time per output "
                                              "token after the first, in seconds.", "tpot_s"),
    "e2e_request_latency_seconds": (LATENCY_BUCKETS, "Histogram of end-to-end request latency in seconds "
                                    "(queue included).", "e2e_s"),
    "request_queue_time_seconds": (LATENCY_BUCKETS, "Histogram of the time requests waited in the queue, "
                                   "in seconds.", "queue_s"),
}


class ServerMetrics:
    """The figures of one server since it started, and its last ``history_s`` seconds.

    ``gauges()`` returns ``running``, ``waiting``, ``kv_used_tokens`` and ``kv_capacity_tokens``
    (a missing one reads 0; a capacity of 0 means the KV is not known). ``clock``: seconds on a
    steady clock, for the history (tests pass their own)."""

    def __init__(self, gauges: Gauges | None = None, *, clock: Callable[[], float] = time.monotonic,
                 history_s: float = HISTORY_S) -> None:
        self._gauges: Gauges = gauges or dict
        self._clock = clock
        self.history_s = history_s
        self._lock = threading.Lock()
        self._recent: deque[tuple[float, FinishedRequest]] = deque(maxlen=MAX_RECENT)
        self._samples: deque[GaugeSample] = deque()
        self._requests: Counter[tuple[str, str]] = Counter()   # (finish reason, priority)
        self._prompt: Counter[str] = Counter()                 # by priority
        self._generated: Counter[str] = Counter()
        self._cached = self._drafted = self._accepted = self._rounds = 0
        self._keys: dict[tuple[str, str], list[int]] = {}      # (name, id): [requests, prompt, generated]
        self._hist: dict[str, dict[str, _Histogram]] = {name: {} for name in _HISTOGRAMS}

    def set_gauges(self, gauges: Gauges) -> None:
        """Where the gauges are read from from now on (the server that owns this registry)."""
        self._gauges = gauges

    # -- writing ------------------------------------------------------------------

    def record(self, done: FinishedRequest, now: float | None = None) -> None:
        """Count one finished request (any thread)."""
        at = self._clock() if now is None else now
        with self._lock:
            self._recent.append((at, done))
            self._prune(at)
            self._requests[(done.finish_reason, done.priority)] += 1
            self._prompt[done.priority] += done.prompt_tokens
            self._generated[done.priority] += done.generated_tokens
            self._cached += done.cached_tokens
            self._drafted += done.drafted
            self._accepted += done.accepted
            self._rounds += done.draft_rounds
            if done.key is not None:
                use = self._keys.setdefault((done.key, done.key_id or ""), [0, 0, 0])
                use[0] += 1
                use[1] += done.prompt_tokens
                use[2] += done.generated_tokens
            for name, (bounds, _help, attr) in _HISTOGRAMS.items():
                value = getattr(done, attr)
                if value is not None:
                    by = self._hist[name]
                    by.setdefault(done.priority, _Histogram(bounds)).observe(max(0.0, value))

    def gauges(self) -> dict[str, float]:
        """The gauges now, from the server's callable."""
        got = self._gauges()
        return {k: float(got.get(k, 0) or 0) for k in ("running", "waiting", "kv_used_tokens", "kv_capacity_tokens")}

    def sample(self, now: float | None = None) -> GaugeSample:
        """Read the gauges and keep them for the history (the app calls this every second)."""
        g = self.gauges()
        at = self._clock() if now is None else now
        s = GaugeSample(at, int(g["running"]), int(g["waiting"]), int(g["kv_used_tokens"]),
                        int(g["kv_capacity_tokens"]))
        with self._lock:
            self._samples.append(s)
            self._prune(at)
        return s

    def _prune(self, now: float) -> None:
        edge = now - self.history_s
        while self._recent and self._recent[0][0] < edge:
            self._recent.popleft()
        while self._samples and self._samples[0].at < edge:
            self._samples.popleft()

    # -- reading ------------------------------------------------------------------

    def window(self, span_s: float, now: float | None = None, buckets: int = 30) -> MetricsWindow:
        """The last ``span_s`` seconds (at most ``history_s``): counts, percentiles, samples, keys."""
        at = self._clock() if now is None else now
        span = min(span_s, self.history_s)
        with self._lock:
            recent = [(t, d) for t, d in self._recent if at - span <= t <= at]
            samples = [s for s in self._samples if at - span <= s.at <= at]
        return summarize(recent, samples, span, at, buckets)

    def exposition(self) -> str:
        """``GET /metrics``: Prometheus' text format, version 0.0.4."""
        gauges = self.gauges()
        with self._lock:
            families = [*_gauge_families(gauges), *self._counter_families(), *self._histogram_families()]
        return exposition_text(families)

    def _counter_families(self) -> list[MetricFamily]:
        def counter(name: str, help: str) -> MetricFamily:
            return MetricFamily(f"{PREFIX}{name}_total", "counter", help)

        ok = counter("request_success", "Count of finished requests, by finish reason and priority class.")
        for (reason, prio), n in sorted(self._requests.items()):
            ok.add(n, {"finished_reason": reason, "priority": prio})
        prompt = counter("prompt_tokens", "Number of prompt tokens of finished requests, cached ones included.")
        gen = counter("generation_tokens", "Number of generated tokens of finished requests.")
        for prio in sorted(self._prompt):
            prompt.add(self._prompt[prio], {"priority": prio})
            gen.add(self._generated[prio], {"priority": prio})
        plain = [counter(name, help) for name, help in (
            ("prompt_tokens_cached", "Number of prompt tokens reused from the cache."),
            ("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
            ("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
            ("spec_decode_num_drafts", "Speculative: verification steps."),
            ("spec_decode_num_draft_tokens", "Speculative: draft tokens proposed."),
            ("spec_decode_num_accepted_tokens", "Speculative: draft tokens accepted by the target model."))]
        for f, value in zip(plain, (self._cached, sum(self._prompt.values()), self._cached, self._rounds,
                                    self._drafted, self._accepted)):
            f.add(value)
        keys = [counter(name, help) for name, help in (
            ("key_requests", "Finished requests made with each API key."),
            ("key_prompt_tokens", "Prompt tokens of the requests made with each API key."),
            ("key_generation_tokens", "Generated tokens of the requests made with each API key."))]
        for (name, kid), use in sorted(self._keys.items()):
            for f, value in zip(keys, use):
                f.add(value, {"key": name, "key_id": kid})
        return [ok, prompt, gen, *plain, *keys]

    def _histogram_families(self) -> list[MetricFamily]:
        out = []
        for name, (bounds, help, _attr) in _HISTOGRAMS.items():
            f = MetricFamily(PREFIX + name, "histogram", help)
            for prio, h in sorted(self._hist[name].items(), key=lambda kv: _rank(kv[0])):
                f.histogram(bounds, h.counts, h.total, {"priority": prio})
            out.append(f)
        return out


def _rank(priority: str) -> tuple[int, str]:
    return (PRIORITIES.index(priority) if priority in PRIORITIES else len(PRIORITIES), priority)


def _gauge_families(g: Mapping[str, float]) -> list[MetricFamily]:
    out = []
    for name, help, value in (
            ("num_requests_running", "Number of requests being answered now.", g["running"]),
            ("num_requests_waiting", "Number of requests waiting to be answered.", g["waiting"])):
        f = MetricFamily(PREFIX + name, "gauge", help)
        f.add(value)
        out.append(f)
    cap = g["kv_capacity_tokens"]
    if cap > 0:  # unknown on an engine without a batch context: left out rather than read as empty
        for name, help, value in (
                ("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", g["kv_used_tokens"] / cap),
                ("kv_cache_tokens", "Tokens held in the KV cache.", g["kv_used_tokens"]),
                ("kv_cache_capacity_tokens", "Tokens the KV cache can hold.", cap)):
            f = MetricFamily(PREFIX + name, "gauge", help)
            f.add(value)
            out.append(f)
    return out

"""Where one reply's time went: the recorder of its timeline.

The timeline is part of the reply's one metrics record (engine/metrics.py's
GenerationStats: ``timed``, the parts, ``step_ms``, the cache counters), stored
with the message. ``Recorder`` fills those fields in. It is chosen once per
request (``Recorder`` or ``NO_TIMELINE``): the decode loop never asks whether
it is recording. Per token it appends one arrival time and times the sampler
and the detokenizer (two ``perf_counter`` calls each); everything else is
derived at the end.
"""
from __future__ import annotations

import collections
from time import perf_counter
from typing import Callable, Mapping, Sequence

import numpy as np

from .metrics import GenerationStats
from .sampling import Sampler
from ..types import SamplingParams

class TimedSampler(Sampler):
    """The request's sampler, adding up the seconds spent in it (speculative
    verification and sampled drafts included)."""

    __slots__ = ("spent",)

    def __init__(self, params: SamplingParams) -> None:
        super().__init__(params)
        self.spent = 0.0

    def __call__(self, history: Sequence[int], logits: np.ndarray) -> int:
        t0 = perf_counter()
        tok = Sampler.__call__(self, history, logits)
        self.spent += perf_counter() - t0
        return tok

    def distribution(self, history: Sequence[int], logits: np.ndarray) -> np.ndarray:
        t0 = perf_counter()
        out = Sampler.distribution(self, history, logits)
        self.spent += perf_counter() - t0
        return out

    def sample(self, probs: np.ndarray) -> int:
        t0 = perf_counter()
        out = Sampler.sample(self, probs)
        self.spent += perf_counter() - t0
        return out


class Recorder:
    """Records one request's timeline. The engine makes one per request and
    hands its pieces to the loop; ``finish`` writes it into the reply's stats."""

    def __init__(self, t_start: float, cache_counters: Callable[[], Mapping[str, float]]) -> None:
        self.t_start = t_start
        self._counters = cache_counters
        self._before = dict(cache_counters())
        self.template_s = 0.0
        self.tokenize_s = 0.0
        self.arrivals: list[float] = []
        self.mark = self.arrivals.append   # once per token: its arrival time
        self._sampler: TimedSampler | None = None
        self._sampling_before_first = 0.0
        self._detok_s = 0.0
        self._detok_last = 0.0             # the latest push's seconds
        self._detok_tail = 0.0             # flushing after the last token
        self._pushes = 0

    def prompt_built(self, template_s: float, tokenize_s: float) -> None:
        """The chat template and tokenizer time of this request."""
        self.template_s, self.tokenize_s = template_s, tokenize_s

    def make_sampler(self, params: SamplingParams) -> Sampler:
        """This request's sampler, timed."""
        self._sampler = TimedSampler(params)
        return self._sampler

    def timed(self, push: Callable[[int], str]) -> Callable[[int], str]:
        """The detokenizer's ``push``, timed."""
        def timed_push(tok: int) -> str:
            t0 = perf_counter()
            out = push(tok)
            self._detok_last = perf_counter() - t0
            self._detok_s += self._detok_last
            self._pushes += 1
            return out
        return timed_push

    def timed_flush(self, flush: Callable[[], str]) -> Callable[[], str]:
        """The detokenizer's ``flush`` (after the last token), timed."""
        def timed() -> str:
            t0 = perf_counter()
            out = flush()
            self._detok_tail += perf_counter() - t0
            return out
        return timed

    def first_token(self) -> None:
        """Called once, when the first token arrives: its sampling belongs to the prefill."""
        if self._sampler is not None:
            self._sampling_before_first = self._sampler.spent

    def finish(self, stats: GenerationStats, *, kv_used: int) -> None:
        """Write the timeline into the reply's final ``stats`` (its counts and timing
        fields filled in, ``prefill_ms`` from the prompt being ready to the first token)."""
        arr = self.arrivals
        sampling = self._sampler.spent if self._sampler is not None else 0.0
        # Inside the decode span (first arrival -> last): every sampling but the
        # first token's, every push but the last token's (when it was pushed).
        detok_in_span = self._detok_s - (self._detok_last if self._pushes == len(arr) and arr else 0.0)
        span = (arr[-1] - arr[0]) if arr else 0.0
        after = self._counters()
        stats.timed = True
        stats.template_ms, stats.tokenize_ms = self.template_s * 1e3, self.tokenize_s * 1e3
        # Choosing the first token is sampling, not reading the prompt.
        stats.prefill_ms = max(0.0, stats.prefill_ms - self._sampling_before_first * 1e3)
        stats.step_ms = [(b - a) * 1e3 for a, b in zip(arr, arr[1:])]
        stats.forward_ms = max(0.0, span - (sampling - self._sampling_before_first) - detok_in_span) * 1e3
        stats.sampling_ms = sampling * 1e3
        stats.detokenize_ms = (self._detok_s + self._detok_tail) * 1e3
        stats.kv_used = kv_used
        stats.cache_hits = int(after.get("hits", 0) - self._before.get("hits", 0))
        stats.cache_inserts = int(after.get("inserts", 0) - self._before.get("inserts", 0))
        stats.cache_evictions = int(after.get("evictions", 0) - self._before.get("evictions", 0))


class _NoTimeline(Recorder):
    """The recorder of a request that keeps no timeline: every hook is the
    plain thing itself, so the loop runs exactly as it would without one."""

    def __init__(self) -> None:
        super().__init__(0.0, dict)
        sink: collections.deque[float] = collections.deque(maxlen=0)
        self.mark = sink.append  # discards, in C

    def make_sampler(self, params: SamplingParams) -> Sampler:
        return Sampler(params)

    def timed(self, push: Callable[[int], str]) -> Callable[[int], str]:
        return push

    def timed_flush(self, flush: Callable[[], str]) -> Callable[[], str]:
        return flush

    def prompt_built(self, template_s: float, tokenize_s: float) -> None:
        pass

    def first_token(self) -> None:
        pass

    def finish(self, stats: GenerationStats, *, kv_used: int) -> None:
        pass


NO_TIMELINE = _NoTimeline()

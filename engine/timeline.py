"""Where one reply's time went: the per-reply timeline, and its recorder.

``Timeline`` is a plain dataclass that travels on the final GenerationStats
(``stats.timeline``) and is stored with the message as JSON (``to_dict`` /
``from_dict``). Its ``parts()`` are the non-overlapping segments of the reply,
in request order, that a stacked bar draws; they add up to ``e2e_ms`` except
for a little glue (``other_ms``).

``Recorder`` fills one in. It is chosen once per request (``Recorder`` or
``NO_TIMELINE``): the decode loop never asks whether it is recording. Per
token it appends one arrival time and times the sampler and the detokenizer
(two ``perf_counter`` calls each); everything else is derived at the end.
"""
from __future__ import annotations

import collections
from dataclasses import asdict, dataclass, field, fields
from time import perf_counter
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .metrics import percentile
from .sampling import Sampler
from .types import SamplingParams

PARTS = ("template_ms", "tokenize_ms", "queue_wait_ms", "prefill_ms", "decode_ms", "sampling_ms",
         "detokenize_ms")


@dataclass(slots=True)
class Timeline:
    """One reply, from the request to the last token. Times in ms."""

    template_ms: float = 0.0       # rendering the chat template
    tokenize_ms: float = 0.0       # turning the rendered text into token ids
    queue_wait_ms: float = 0.0     # waiting for a scheduler's turn (0 when not scheduled)
    prefill_ms: float = 0.0        # reading the prompt: KV reuse, prefill and the first forward
    prefill_tokens: int = 0        # prompt tokens computed (not served from a cache)
    prefill_tok_s: float = 0.0
    cached_tokens: int = 0         # prompt tokens served from the live KV or the prefix cache
    prompt_tokens: int = 0
    ttft_ms: float = 0.0           # request -> first text handed to the caller
    generated_tokens: int = 0
    step_ms: list[float] = field(default_factory=list)  # token i's arrival -> token i+1's
    tpot_p50_ms: float = 0.0
    tpot_p90_ms: float = 0.0
    tpot_p99_ms: float = 0.0
    slowest_step: int = -1         # index into step_ms, -1 without steps
    slowest_step_ms: float = 0.0
    decode_ms: float = 0.0         # the steps less their sampling and detokenizing: forward passes
    sampling_ms: float = 0.0       # choosing tokens (and judging drafts), all tokens
    sampling_ms_per_token: float = 0.0
    detokenize_ms: float = 0.0     # token ids -> text, stop strings
    spec_acceptance: list[float] = field(default_factory=list)  # acceptance rate per draft position
    kv_used: int = 0               # tokens in the KV at the end of the reply
    n_ctx: int = 0
    cache_hits: int = 0            # prefix-cache snapshots served during this reply
    cache_inserts: int = 0         # snapshots stored during this reply
    cache_evictions: int = 0       # snapshots evicted to make room during this reply
    e2e_ms: float = 0.0            # request (queue included) -> final event

    def parts(self) -> dict[str, float]:
        """The non-overlapping segments of the reply, in order, in ms (a stacked bar)."""
        return {name[:-3]: getattr(self, name) for name in PARTS}

    @property
    def other_ms(self) -> float:
        """What ``parts()`` leaves out of ``e2e_ms``: glue between the parts."""
        return self.e2e_ms - sum(getattr(self, name) for name in PARTS)

    def record_queue_wait(self, ms: float) -> None:
        """A scheduler's way to add the time this request waited before the engine
        started it: the user waited it too, so TTFT and end-to-end grow by it."""
        if ms < 0:
            raise ValueError(f"queue wait cannot be negative: {ms}")
        self.queue_wait_ms += ms
        self.ttft_ms += ms
        self.e2e_ms += ms

    def to_dict(self) -> dict:
        """JSON-able, times rounded to the microsecond."""
        d = asdict(self)
        d["step_ms"] = [round(x, 3) for x in self.step_ms]
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Timeline":
        """The inverse of ``to_dict``; keys it does not know (a newer version's) are ignored."""
        known = {f.name for f in fields(cls)}
        kept: dict[str, Any] = {k: (list(v) if isinstance(v, list) else v) for k, v in d.items() if k in known}
        return cls(**kept)


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
    hands its pieces to the loop; ``finish`` builds the Timeline."""

    def __init__(self, t_start: float, cache_counters: Callable[[], Mapping[str, float]]) -> None:
        self.t_start = t_start
        self._counters = cache_counters
        self._before = dict(cache_counters())
        self.template_s = 0.0
        self.tokenize_s = 0.0
        self.t_prefill = t_start
        self.arrivals: list[float] = []
        self.mark = self.arrivals.append   # once per token: its arrival time
        self._sampler: TimedSampler | None = None
        self._sampling_before_first = 0.0
        self._detok_s = 0.0
        self._detok_last = 0.0             # the latest push's seconds
        self._detok_tail = 0.0             # flushing after the last token
        self._pushes = 0

    def prompt_built(self, template_s: float, tokenize_s: float) -> None:
        """The chat template and tokenizer time of this request; prefill starts now."""
        self.template_s, self.tokenize_s = template_s, tokenize_s
        self.t_prefill = perf_counter()

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

    def finish(self, stats: Any, *, kv_used: int, t_end: float) -> Timeline | None:
        """Build the timeline from what was recorded and the reply's final ``stats``
        (a GenerationStats, its timing fields filled in)."""
        arr = self.arrivals
        steps = [(b - a) * 1e3 for a, b in zip(arr, arr[1:])]
        sampling = self._sampler.spent if self._sampler is not None else 0.0
        detok = self._detok_s + self._detok_tail
        # Inside the decode span (first arrival -> last): every sampling but the
        # first token's, every push but the last token's (when it was pushed).
        detok_in_span = self._detok_s - (self._detok_last if self._pushes == len(arr) and arr else 0.0)
        span = (arr[-1] - arr[0]) if arr else 0.0
        t_first = arr[0] if arr else t_end
        prefill_s = max(0.0, t_first - self.t_prefill - self._sampling_before_first)
        slowest = int(np.argmax(steps)) if steps else -1
        after = self._counters()
        tl = Timeline(
            template_ms=self.template_s * 1e3, tokenize_ms=self.tokenize_s * 1e3,
            prefill_ms=prefill_s * 1e3, prefill_tokens=stats.prefill_tokens,
            prefill_tok_s=stats.prefill_tokens / prefill_s if prefill_s > 0 else 0.0,
            cached_tokens=stats.cached_tokens, prompt_tokens=stats.prompt_tokens, ttft_ms=stats.ttft_ms,
            generated_tokens=stats.generated_tokens, step_ms=steps,
            tpot_p50_ms=percentile(steps, 50), tpot_p90_ms=percentile(steps, 90),
            tpot_p99_ms=percentile(steps, 99), slowest_step=slowest,
            slowest_step_ms=steps[slowest] if steps else 0.0,
            decode_ms=max(0.0, span - (sampling - self._sampling_before_first) - detok_in_span) * 1e3,
            sampling_ms=sampling * 1e3,
            sampling_ms_per_token=sampling * 1e3 / len(arr) if arr else 0.0,
            detokenize_ms=detok * 1e3,
            spec_acceptance=list((stats.spec or {}).get("acceptance_per_position", [])),
            kv_used=kv_used, n_ctx=stats.n_ctx,
            e2e_ms=(t_end - self.t_start) * 1e3,
        )
        tl.cache_hits = int(after.get("hits", 0) - self._before.get("hits", 0))
        tl.cache_inserts = int(after.get("inserts", 0) - self._before.get("inserts", 0))
        tl.cache_evictions = int(after.get("evictions", 0) - self._before.get("evictions", 0))
        return tl


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

    def finish(self, stats: Any, *, kv_used: int, t_end: float) -> Timeline | None:
        return None


NO_TIMELINE = _NoTimeline()

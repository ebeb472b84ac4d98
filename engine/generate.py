"""The decode loop and the streaming wrapper around it.

``generate_step`` is the whole hot loop: forward, sample, yield. Everything
else (detokenizing, stop strings, cancel, timing) wraps it from outside, so
the loop itself never branches on mode or backend.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Generator, Iterator, Sequence

import numpy as np

from .backends.base import Backend
from .detokenize import IncrementalDetokenizer
from .metrics import GenerationStats
from .timeline import NO_TIMELINE, Recorder
from .types import SamplingParams, StreamEvent

Sampler = Callable[[Sequence[int], np.ndarray], int]
FINISH_CHAR_TOKENS = 3  # byte tokens a reply may run past max_tokens to complete its last character


def generate_step(backend: Backend, pending: Sequence[int], sampler: Sampler,
                  history: list[int]) -> Generator[tuple[int, bool], None, None]:
    """Prefill ``pending`` then yield ``(token, from_draft=False)`` forever.

    ``history`` holds every token so far (the prompt, then each yielded token
    is appended); penalties read it. The caller stops by not asking for more:
    the token just yielded is forwarded only when the next one is requested,
    so stopping never wastes a forward pass.
    """
    logits = backend.forward(pending)
    while True:
        tok = sampler(history, logits)
        history.append(tok)
        yield tok, False
        logits = backend.forward((tok,))


def no_steps() -> Generator[tuple[int, bool], None, None]:
    """The step generator of a request stopped before its first token."""
    return
    yield  # the bare yield makes this a generator


def stream_tokens(backend: Backend, steps: Generator[tuple[int, bool], None, None], *, prompt_len: int, cached: int,
                  params: SamplingParams, stats: GenerationStats, t_start: float,
                  cancel: threading.Event | None = None, spec_stats=None,
                  timeline: Recorder = NO_TIMELINE, t_prefill: float | None = None) -> Iterator[StreamEvent]:
    """Turn a token generator into text events, applying every stop rule.

    Works for any step generator with the ``generate_step`` yield shape, so
    speculative decoding can plug in unchanged. ``timeline``'s hooks are the
    plain ones when it records nothing: the loop is the same either way.
    ``t_prefill``: when the prompt's tokens were ready (``t_start`` if not given);
    ``stats.prefill_ms`` runs from it. Every event carries ``stats``: on a delta
    it is the record so far, its live figures kept current (``stats.live()``),
    so no caller counts tokens or times the stream itself.
    """
    detok = IncrementalDetokenizer(backend.token_bytes, params.stop)
    push, mark = timeline.timed(detok.push), timeline.mark
    eos = frozenset() if params.ignore_eos else backend.eos_ids
    n_ctx = backend.n_ctx
    stats.prompt_tokens = prompt_len
    stats.cached_tokens = cached
    stats.prefill_tokens = prompt_len - cached
    t_prefill = t_start if t_prefill is None else t_prefill
    generated: list[int] = []
    t_first_text = t_first_tok = t_last_tok = None
    reason = "max_tokens"
    extra = 0  # tokens past max_tokens spent finishing a character
    try:
        for tok, _from_draft in steps:
            now = time.perf_counter()
            mark(now)
            if t_first_tok is None:
                t_first_tok = now
                stats.prefill_ms = (now - t_prefill) * 1e3
                timeline.first_token()
            t_last_tok = now
            generated.append(tok)
            stats.generated_tokens = len(generated)
            stats.decode_ms = (now - t_first_tok) * 1e3
            if tok in eos:
                reason = "eos"
                break
            text = push(tok)
            if text:
                if t_first_text is None:
                    t_first_text = time.perf_counter()
                    stats.ttft_ms = (t_first_text - t_start) * 1e3 + stats.queue_wait_ms
                yield StreamEvent("delta", text, stats=stats)
            if detok.stopped:
                reason = "stop_string"
                break
            if len(generated) >= params.max_tokens + extra:
                # Cut inside a character: finish it (a UTF-8 character is at most
                # 4 bytes) rather than end the reply on half of one.
                if detok.incomplete and extra < FINISH_CHAR_TOKENS:
                    extra += 1
                else:
                    reason = "max_tokens"
                    break
            if cancel is not None and cancel.is_set():
                reason = "cancelled"
                break
            # The newest token must be fed back before the next one: no room, no next.
            if prompt_len + len(generated) > n_ctx:
                reason = "context_full"
                break
    finally:
        steps.close()
    if not generated and cancel is not None and cancel.is_set():
        reason = "cancelled"  # stopped before the first token (during the prompt's prefill)
    tail = timeline.timed_flush(detok.flush)()
    if tail:
        if t_first_text is None:
            t_first_text = time.perf_counter()
            stats.ttft_ms = (t_first_text - t_start) * 1e3 + stats.queue_wait_ms
        yield StreamEvent("delta", tail, stats=stats)
    stats.generated_tokens = len(generated)
    stats.finish_reason = reason
    if spec_stats is not None:
        stats.spec = spec_stats.as_dict()
    t_end = time.perf_counter()
    if t_first_tok is None:  # no token at all: reading the prompt was the whole request
        stats.prefill_ms = (t_end - t_prefill) * 1e3
    stats.finish(t_start=t_start, t_first_text=t_first_text, t_first_token=t_first_tok,
                 t_last_token=t_last_tok, t_end=t_end)
    timeline.finish(stats, kv_used=backend.kv_len)
    yield StreamEvent("final", detok.text, finish_reason=reason, stats=stats, token_ids=generated)

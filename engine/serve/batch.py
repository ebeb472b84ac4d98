"""Continuous batching: API sequences stepped together in one batch context.

Each step is one ``BatchBackend.decode``: first one token for every decoding
sequence, then chunks of pending prompts (oldest request first) up to the
step's prefill budget, as llama-server does. Every slot keeps the KV of its
last request, so a new prompt starts from the longest prefix any slot holds
(copied with ``copy_prefix``): a system prompt common to several requests is
computed once. Requests arriving together wait for an earlier one that is
still reading the same prefix instead of computing it again.

Sampling, stop strings and metrics are the engine's own: each sequence's
tokens go through ``generate.stream_tokens`` in the reader's thread, fed from
a queue, so the decode thread only decodes and samples.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Generator

from ..backends.base import Backend, BatchBackend
from ..errors import HearthError, PromptTooLongError
from ..formats import Layout
from ..formats.tools import ToolPlan
from ..generate import FINISH_CHAR_TOKENS, stream_tokens
from ..grammar import ConstrainedSampler, TokenConstraint
from ..kv.prefix_cache import common_prefix_len
from ..metrics import GenerationStats, openai_finish_reason
from ..sampling import make_sampler
from ..types import SamplingParams
from .requests import Ticket

MIN_SHARE = 16  # a prefix shorter than this is recomputed rather than waited for


class Feed:
    """The token queue between the decode thread and one reader's stream_tokens."""

    def __init__(self) -> None:
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.closed = threading.Event()     # the reader stopped (stop string, max_tokens, disconnect)
        self.end_reason: str | None = None  # why the decode thread ended the stream early

    def steps(self) -> Generator[tuple[int, bool], None, None]:
        """A step generator (generate_step's yield shape) that blocks for each token."""
        try:
            while True:
                item = self.q.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item, False
        finally:
            self.closed.set()

    def end(self, reason: str | BaseException | None) -> None:
        """No more tokens: ``reason`` overrides the reader's finish reason
        (None: the reader ended it itself), or an error to raise there."""
        if isinstance(reason, BaseException):
            self.q.put(reason)
        else:
            self.end_reason = reason
            self.q.put(None)


class Slot:
    """One sequence of the batch context and the request it is serving."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.kv: list[int] = []          # the tokens whose KV this sequence holds, by position
        self.ticket: Ticket | None = None
        self.prompt: list[int] = []
        self.history: list[int] = []
        self.next_tok: int | None = None  # sampled, not yet fed back
        self.generated = 0
        self.limit = 0
        self.eos: frozenset[int] = frozenset()
        self.sampler: ConstrainedSampler | object = None
        self.constraint: TokenConstraint | None = None
        self.feed = Feed()
        self.wait_for: tuple[Slot, int] | None = None  # (slot reading our prefix, its length)
        self.t_admit = self.t_first = 0.0

    @property
    def prefilling(self) -> bool:
        return self.ticket is not None and self.next_tok is None


class BatchRunner:
    """The slots of one batch context and the step that advances them all."""

    def __init__(self, backend: Backend, batch: BatchBackend, *, slot_ctx: int, prefill_chunk: int) -> None:
        self.backend = backend
        self.batch = batch
        self.slot_ctx = slot_ctx
        self.prefill_chunk = prefill_chunk
        self.slots = [Slot(i) for i in range(batch.n_seq)]

    # -- admission ----------------------------------------------------------------

    def free(self) -> int:
        return sum(1 for s in self.slots if s.ticket is None)

    def active(self) -> list[Slot]:
        return [s for s in self.slots if s.ticket is not None]

    def admit(self, ticket: Ticket, prompt: list[int], params: SamplingParams,
              constraint: TokenConstraint | None, *, layout: Layout | None = None, opened: bool = False,
              tools: ToolPlan | None = None) -> None:
        """Give ``ticket`` a free slot; its events start flowing through the ticket.

        ``layout``/``opened``: the model's reasoning layout and whether the prompt opened
        its block, so the reply splits into reasoning and answer as the engine's does.
        Here the grammar still applies from the first token, and a thinking budget
        cannot feed its closing text (the decode thread samples ahead of the reader;
        the reply's notes say the budget was not applied)."""
        if len(prompt) >= self.slot_ctx:
            raise PromptTooLongError(f"the prompt is {len(prompt)} tokens but a request's context holds "
                                     f"{self.slot_ctx}; shorten it or raise the context length")
        free = [s for s in self.slots if s.ticket is None]
        # The free slot holding the longest prefix of this prompt, or the least useful one.
        dst = max(free, key=lambda s: common_prefix_len(s.kv, prompt))
        own = min(common_prefix_len(dst.kv, prompt), len(prompt) - 1)
        src, best = dst, own
        for s in self.slots:
            n = min(common_prefix_len(s.kv, prompt), len(prompt) - 1)
            if n > best:
                src, best = s, n
        if src is dst:
            self.batch.seq_rm(dst.seq, own)
            dst.kv = dst.kv[:own]
        else:
            self._share(src, dst, best)
        dst.wait_for = None
        for s in self.active():  # an earlier request still reading a longer common prefix
            n = min(common_prefix_len(s.prompt, prompt), len(prompt) - 1)
            if n >= max(best + MIN_SHARE, MIN_SHARE) and len(s.kv) < n:
                dst.wait_for = (s, n)
                break
        dst.ticket, dst.prompt, dst.history = ticket, prompt, list(prompt)
        dst.next_tok, dst.generated = None, 0
        dst.limit = params.max_tokens + FINISH_CHAR_TOKENS
        dst.eos = frozenset() if params.ignore_eos else self.backend.eos_ids
        sampler = make_sampler(params)
        dst.constraint = constraint
        dst.sampler = sampler if constraint is None else ConstrainedSampler(sampler, constraint)
        dst.feed = Feed()
        dst.t_admit = time.perf_counter()
        t = ticket.times
        t.queue_wait_s = dst.t_admit - ticket.submitted
        t.prompt_tokens, t.cached_tokens = len(prompt), len(dst.kv)
        # The reply's clock starts at admission; the wait before it is the queue's.
        stats = GenerationStats(backend=self.backend.name, n_ctx=self.slot_ctx,
                                queue_wait_ms=t.queue_wait_s * 1e3)
        events = stream_tokens(self.backend, dst.feed.steps(), prompt_len=len(prompt), cached=len(dst.kv),
                               params=params, stats=stats, t_start=dst.t_admit, cancel=ticket.cancel_flag,
                               layout=layout, opened=opened, tools=tools)
        feed = dst.feed
        ticket.post_stream(events, lambda: feed.end_reason)

    def _share(self, src: Slot, dst: Slot, n: int) -> None:
        self.batch.copy_prefix(src.seq, dst.seq, n)
        dst.kv = src.kv[:n]

    # -- the step -------------------------------------------------------------------

    def step(self, *, decode_only: bool = False) -> int:
        """One batch: a token per decoding sequence, then prompt chunks (none if
        ``decode_only``). Returns how many tokens were computed."""
        for s in self.active():
            assert s.ticket is not None
            if s.ticket.cancel_flag.is_set():
                self._end(s, "cancelled")
            elif s.feed.closed.is_set():
                self._end(s, None)
        rows: list[tuple[Slot, list[int], int, bool]] = [
            (s, [s.next_tok], len(s.kv), True) for s in self.slots if s.ticket is not None and s.next_tok is not None]
        budget = 0 if decode_only else min(self.prefill_chunk, self.batch.n_batch - len(rows))
        for s in sorted((s for s in self.slots if s.prefilling), key=lambda s: s.ticket.seq if s.ticket else 0):
            if budget <= 0:
                break
            if not self._ready(s):
                continue
            pending = s.prompt[len(s.kv):]
            take = pending[:budget]
            rows.append((s, take, len(s.kv), len(take) == len(pending)))
            budget -= len(take)
        if not rows:
            return 0
        try:
            logits = self.batch.decode([(s.seq, toks, pos, want) for s, toks, pos, want in rows])
        except HearthError as e:
            for s, _toks, pos, _want in rows:
                s.kv = s.kv[:pos]
                self._end(s, e)
            return 0
        now = time.perf_counter()
        for (s, toks, _pos, _want), lg in zip(rows, logits):
            s.kv.extend(toks)
            if lg is not None:
                self._sampled(s, lg, now)
        return sum(len(r[1]) for r in rows)

    def _ready(self, s: Slot) -> bool:
        """Whether a prefilling slot may compute now, or waits to share a prefix."""
        if s.wait_for is None:
            return True
        src, n = s.wait_for
        if src.ticket is None or src.prompt[:n] != s.prompt[:n]:
            s.wait_for = None  # it left: compute the prefix here
            return True
        if len(src.kv) < n:
            return False
        self._share(src, s, n)
        assert s.ticket is not None
        s.ticket.times.cached_tokens = n
        s.wait_for = None
        return True

    def _sampled(self, s: Slot, logits, now: float) -> None:
        assert callable(s.sampler) and s.ticket is not None
        try:
            tok = s.sampler(s.history, logits)
        except HearthError as e:
            self._end(s, e)
            return
        s.history.append(tok)
        s.generated += 1
        times = s.ticket.times
        if s.generated == 1:
            s.t_first = now
            times.prefill_s = now - s.t_admit
        times.decode_s = now - s.t_first
        s.feed.q.put(tok)
        if tok in s.eos or s.generated >= s.limit:
            self._end(s, None)
        elif len(s.kv) + 1 > self.slot_ctx:
            self._end(s, "context_full")
        else:
            s.next_tok = tok

    def _end(self, s: Slot, reason: str | BaseException | None) -> None:
        """The slot's request is over; unless cancelled, its KV stays for the next prompt to share."""
        s.feed.end(reason)
        if reason == "cancelled":  # a client that left: its cells go back to the others
            self.batch.seq_rm(s.seq, 0)
            s.kv = []
        if reason is not None and s.ticket is not None:  # known now, even before the reader sees it
            s.ticket.times.finish_reason = ("error" if isinstance(reason, BaseException)
                                            else openai_finish_reason(reason))
        if s.constraint is not None:
            s.constraint.close()
            s.constraint = None
        s.ticket = None
        s.next_tok = None
        s.wait_for = None
        s.sampler = None

    def cancel_all(self) -> None:
        for s in self.active():
            self._end(s, "cancelled")

    def close(self) -> None:
        self.cancel_all()
        self.batch.close()


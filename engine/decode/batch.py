"""Continuous batching: several requests' sequences stepped together in one batch context.

Each step is one ``BatchBackend.decode``: first one token for every decoding
sequence, then chunks of pending prompts (oldest request first) up to the
step's prefill budget, as llama-server does. Every slot keeps the KV of its
last request, so a new prompt starts from the longest prefix any slot holds
(the slot table, engine/kv/slots.py): a system prompt common to several
requests is computed once. Requests arriving together wait for an earlier one
that is still reading the same prefix instead of computing it again.

Prompts are prepared as for one sequence (``prepare_request``), and sampling,
stop strings and metrics are the engine's own: each sequence's tokens go
through ``stream.stream_tokens`` in the reader's thread, fed from a queue, so
the decode thread only decodes and samples. A request is anything with the
:class:`BatchClient` shape (the server's Ticket).
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, Sequence

from ..errors import HearthError, PromptTooLongError
from ..kv.slots import SlotTable
from ..prompt.builder import PromptBuilder
from ..prompt.messages import Message
from ..reply_formats import Layout
from ..reply_formats.tools import ToolPlan
from ..types import SamplingParams, StreamEvent
from .constraint import ConstrainedSampler
from .feed import Feed
from .metrics import GenerationStats, openai_finish_reason
from .prepare import Prepared, prepare_request
from .resample import resample_params
from .sampling import make_sampler
from .stream import FINISH_CHAR_TOKENS, stream_tokens

if TYPE_CHECKING:
    from ..backends.base import Backend, BatchBackend, TokenConstraint
    from ..prompt.chat_template import ChatTemplate


class BatchTimes(Protocol):
    """Where a request's time went, as the runner fills it in."""
    queue_wait_s: float
    prefill_s: float
    decode_s: float
    prompt_tokens: int
    cached_tokens: int
    finish_reason: str | None


class BatchClient(Protocol):
    """What the runner needs of a request: when it came and in which order, its cancel flag,
    where its times go, and where its events go (``post_stream``)."""
    seq: int
    submitted: float
    cancel_flag: threading.Event

    @property
    def times(self) -> BatchTimes: ...

    def post_stream(self, events: Iterator[StreamEvent], end_reason: Callable[[], str | None]) -> None: ...


class Slot:
    """One sequence of the batch context and the request it is serving."""

    def __init__(self, seq: int, table: SlotTable) -> None:
        self.seq = seq
        self.table = table
        self.client: BatchClient | None = None
        self.prompt: list[int] = []
        self.history: list[int] = []
        self.next_tok: int | None = None  # sampled, not yet fed back
        self.generated = 0
        self.limit = 0
        self.eos: frozenset[int] = frozenset()
        self.sampler: ConstrainedSampler | Callable | None = None
        self.constraint: TokenConstraint | None = None
        self.params = SamplingParams()
        self.feed = Feed()
        self.wait_for: tuple[Slot, int] | None = None  # (slot reading our prefix, its length)
        self.t_admit = self.t_first = 0.0
        self.epoch = 0             # the draw being decoded (a failed tool call's section drawn again)
        self.rewindable = False    # tools are offered: the slot waits for its reader before it is freed
        self.draining = False      # decoding ended; the reader may still ask for a draw again

    @property
    def kv(self) -> list[int]:
        """The tokens whose KV this sequence holds, by position (the slot table's record)."""
        return self.table.kv[self.seq]

    @property
    def prefilling(self) -> bool:
        return self.client is not None and self.next_tok is None and not self.draining


class BatchRunner:
    """The slots of one batch context and the step that advances them all."""

    def __init__(self, backend: "Backend", batch: "BatchBackend", *, slot_ctx: int, prefill_chunk: int) -> None:
        self.backend = backend
        self.batch = batch
        self.slot_ctx = slot_ctx
        self.prefill_chunk = prefill_chunk
        self.table = SlotTable(batch.n_seq)
        self.slots = [Slot(i, self.table) for i in range(batch.n_seq)]
        self.wake: Callable[[], None] = lambda: None  # a reader closed its feed or asked for a draw again

    # -- admission ----------------------------------------------------------------

    def free(self) -> int:
        return sum(1 for s in self.slots if s.client is None)

    def active(self) -> list[Slot]:
        return [s for s in self.slots if s.client is not None]

    def busy(self) -> bool:
        """Whether a step has anything to do: a sequence decoding or reading its prompt, or one that
        ended and whose reader closed its feed or asked for a draw again."""
        return any(s.client is not None and (not s.draining or s.feed.closed.is_set() or not s.feed.rewinds.empty())
                   for s in self.slots)

    def admit(self, client: BatchClient, req: Prepared) -> None:
        """Give ``client`` a free slot for ``req``; its events start flowing through the client.

        The reply splits into reasoning and answer as the engine's does. Here the grammar
        still applies from the first token, and a thinking budget cannot feed its closing
        text (the decode thread samples ahead of the reader; the reply's notes say the
        budget was not applied). Raises HearthError (a prompt too long, a bad grammar)."""
        prompt, params = req.tokens, req.params
        if len(prompt) >= self.slot_ctx:
            raise PromptTooLongError(f"the prompt is {len(prompt)} tokens but a request's context holds "
                                     f"{self.slot_ctx}; shorten it or raise the context length")
        constraint = req.constraint(self.backend)
        place = self.table.place([s.seq for s in self.slots if s.client is None], prompt)
        dst = self.slots[place.dst]
        if place.src == place.dst:
            self.batch.seq_rm(dst.seq, place.shared)
            self.table.cut(dst.seq, place.shared)
        else:
            self._share(self.slots[place.src], dst, place.shared)
        found = self.table.reading(prompt, place.shared, [(s.seq, s.prompt) for s in self.active()])
        dst.wait_for = (self.slots[found[0]], found[1]) if found is not None else None
        dst.client, dst.prompt, dst.history = client, prompt, list(prompt)
        dst.next_tok, dst.generated = None, 0
        dst.limit = params.limit + FINISH_CHAR_TOKENS
        dst.eos = frozenset() if params.ignore_eos else self.backend.eos_ids
        sampler = make_sampler(params)
        dst.constraint = constraint
        dst.sampler = sampler if constraint is None else ConstrainedSampler(sampler, constraint)
        dst.params, dst.epoch, dst.draining, dst.rewindable = params, 0, False, req.tools is not None
        dst.feed = Feed(lambda: self.wake())
        dst.t_admit = time.perf_counter()
        t = client.times
        t.queue_wait_s = dst.t_admit - client.submitted
        t.prompt_tokens, t.cached_tokens = len(prompt), len(dst.kv)
        # The reply's clock starts at admission; the wait before it is the queue's.
        stats = GenerationStats(backend=self.backend.name, profile=getattr(self.backend, "exactness", ""),
                                n_ctx=self.slot_ctx, queue_wait_ms=t.queue_wait_s * 1e3)
        events = stream_tokens(self.backend, dst.feed.steps(), prompt_len=len(prompt), cached=len(dst.kv),
                               params=params, stats=stats, t_start=dst.t_admit, cancel=client.cancel_flag,
                               layout=req.layout, opened=req.opened, tools=req.tools,
                               rewind=dst.feed if dst.rewindable else None)
        feed = dst.feed
        client.post_stream(events, lambda: feed.end_reason)

    def _share(self, src: Slot, dst: Slot, n: int) -> None:
        self.batch.copy_prefix(src.seq, dst.seq, n)
        self.table.copy(src.seq, dst.seq, n)

    # -- the step -------------------------------------------------------------------

    def step(self, *, decode_only: bool = False) -> int:
        """One batch: a token per decoding sequence, then prompt chunks (none if
        ``decode_only``). Returns how many tokens were computed."""
        for s in self.active():
            assert s.client is not None
            while not s.feed.rewinds.empty() and not s.client.cancel_flag.is_set():
                self._rewind(s, *s.feed.rewinds.get())
            if s.client.cancel_flag.is_set():
                self._end(s, "cancelled")
            elif s.feed.closed.is_set() and s.draining:
                self._release(s)
            elif s.feed.closed.is_set():
                self._end(s, None)
        rows: list[tuple[Slot, list[int], int, bool]] = [
            (s, [s.next_tok], len(s.kv), True) for s in self.slots if s.client is not None and s.next_tok is not None]
        budget = 0 if decode_only else min(self.prefill_chunk, self.batch.n_batch - len(rows))
        for s in sorted((s for s in self.slots if s.prefilling), key=lambda s: s.client.seq if s.client else 0):
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
                self.table.cut(s.seq, pos)
                self._end(s, e)
            return 0
        now = time.perf_counter()
        for (s, toks, _pos, _want), lg in zip(rows, logits):
            self.table.extend(s.seq, toks)
            if lg is not None:
                self._sampled(s, lg, now)
        return sum(len(r[1]) for r in rows)

    def _ready(self, s: Slot) -> bool:
        """Whether a prefilling slot may compute now, or waits to share a prefix."""
        if s.wait_for is None:
            return True
        src, n = s.wait_for
        if src.client is None or src.prompt[:n] != s.prompt[:n]:
            s.wait_for = None  # it left: compute the prefix here
            return True
        if len(src.kv) < n:
            return False
        self._share(src, s, n)
        assert s.client is not None
        s.client.times.cached_tokens = n
        s.wait_for = None
        return True

    def _sampled(self, s: Slot, logits, now: float) -> None:
        assert callable(s.sampler) and s.client is not None
        try:
            tok = s.sampler(s.history, logits)
        except HearthError as e:
            self._end(s, e)
            return
        s.history.append(tok)
        s.generated += 1
        times = s.client.times
        if s.generated == 1:
            s.t_first = now
            times.prefill_s = now - s.t_admit
        times.decode_s = now - s.t_first
        s.feed.put(s.epoch, tok)
        if tok in s.eos or s.generated >= s.limit:
            self._end(s, None)
        elif len(s.kv) + 1 > self.slot_ctx:
            self._end(s, "context_full")
        else:
            s.next_tok = tok

    def _rewind(self, s: Slot, kept: int, draw: int, epoch: int) -> None:
        """Draw a failed tool call's section again: keep the reply's first ``kept`` tokens, cut the KV
        back, set the grammar back, and sample on (decode/resample.py)."""
        keep = len(s.prompt) + kept
        del s.history[keep:]
        s.generated = kept
        if len(s.kv) > keep - 1:
            self.batch.seq_rm(s.seq, keep - 1)
            self.table.cut(s.seq, keep - 1)
        s.next_tok = s.history[-1]  # fed again: its logits start the new draw
        inner = make_sampler(resample_params(s.params, draw))
        if isinstance(s.sampler, ConstrainedSampler):
            s.sampler.rewind(keep, inner)
        else:
            s.sampler = inner
        s.epoch, s.draining = epoch, False

    def _end(self, s: Slot, reason: str | BaseException | None) -> None:
        """The slot's request is over; unless cancelled, its KV stays for the next prompt to share.
        A request with tools keeps its slot until its reader is done: it may ask for a failed call
        to be drawn again."""
        s.feed.end(s.epoch, reason)
        if reason == "cancelled":  # a client that left: its cells go back to the others
            self.batch.seq_rm(s.seq, 0)
            self.table.cut(s.seq, 0)
        if reason is not None and s.client is not None:  # known now, even before the reader sees it
            s.client.times.finish_reason = ("error" if isinstance(reason, BaseException)
                                            else openai_finish_reason(reason))
        if s.rewindable and reason in (None, "context_full") and not s.feed.closed.is_set():
            s.draining, s.next_tok, s.wait_for = True, None, None
            return
        self._release(s)

    def _release(self, s: Slot) -> None:
        """The slot is free for another request."""
        s.draining = False
        if s.constraint is not None:
            s.constraint.close()
            s.constraint = None
        s.client = None
        s.next_tok = None
        s.wait_for = None
        s.sampler = None

    def cancel_all(self) -> None:
        for s in self.active():
            self._end(s, "cancelled")

    def close(self) -> None:
        self.cancel_all()
        self.batch.close()


class BatchSession:
    """An engine's batch context for concurrent requests: the runner, and a prompt builder of
    its own (the window's keeps its cut). ``Engine.open_batch`` makes one."""

    def __init__(self, backend: "Backend", batch: "BatchBackend", template: "ChatTemplate",
                 layout: Layout | None, *, slot_ctx: int, prefill_chunk: int) -> None:
        self.prompts = PromptBuilder(backend, template)
        self.layout = layout
        self.runner = BatchRunner(backend, batch, slot_ctx=slot_ctx, prefill_chunk=prefill_chunk)

    def admit(self, client: BatchClient, params: SamplingParams, *,
              messages: Sequence[Message | Mapping[str, Any]] | None = None, text: str | None = None,
              context_policy: str = "stop", template_kwargs: Mapping[str, Any] | None = None,
              tools: ToolPlan | None = None) -> None:
        """Prepare a request and give it a slot (raises HearthError: the prompt, the grammar)."""
        req = prepare_request(self.prompts, self.layout if messages is not None else None, params,
                              messages=messages, text=text, context_policy=context_policy,
                              template_kwargs=template_kwargs, tools=tools)
        self.runner.admit(client, req)

    def free(self) -> int:
        return self.runner.free()

    def active(self) -> list[Slot]:
        return self.runner.active()

    def busy(self) -> bool:
        return self.runner.busy()

    def on_wake(self, wake: Callable[[], None]) -> None:
        """``wake()`` is called when a reader closes its feed or asks for a draw again (from its thread)."""
        self.runner.wake = wake

    def step(self, *, decode_only: bool = False) -> int:
        return self.runner.step(decode_only=decode_only)

    def cancel_all(self) -> None:
        self.runner.cancel_all()

    def close(self) -> None:
        self.runner.close()

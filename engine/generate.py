"""The decode loop and the streaming wrapper around it.

``generate_step`` is the whole hot loop: forward, sample, yield. Everything
else (detokenizing, stop strings, reasoning, cancel, timing) wraps it from
outside, so the loop itself never branches on mode or backend.

A thinking model's reply is split here, once, for every caller (the window's
Engine.stream and the API's batch path): each token's text goes through the
layout's ``ReasoningParser`` (engine/formats), special tokens spelled out, and
comes out as "reasoning" and "delta" (answer) events; tags and the family's
separators are markup that nobody sees. Stop strings apply to the reply's raw
text, reasoning and tags included, before it is split: that is what llama.cpp's
server and vLLM do (they match stop strings on the generated text and split the
reasoning afterwards), so a stop string behaves the same against Hearth's API.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Generator, Iterator, Sequence, cast

import numpy as np

from .backends.base import Backend
from .detokenize import IncrementalDetokenizer
from .formats import Layout, ReasoningParser, force_close
from .formats.parser import MARKUP, TEXT as PARSED_TEXT
from .formats.tool_parser import ToolCallParser
from .formats.tools import ToolPlan
from .messages import ToolCall, ToolCallDelta
from .metrics import GenerationStats
from .timeline import NO_TIMELINE, Recorder
from .types import TEXT, SamplingParams, StreamEvent

Sampler = Callable[[Sequence[int], np.ndarray], int]
FINISH_CHAR_TOKENS = 3  # byte tokens a reply may run past max_tokens to complete its last character




class Steering:
    """What the stream loop tells the step generator and the sampler about one reply.

    ``forced``: tokens to feed to the model before the next one is sampled (a
    thinking budget's closing text): ``generate_step`` prefills them with the
    token just yielded, so they are read, never sampled. ``free``: the reply is
    inside its reasoning block, where a grammar does not apply
    (``grammar.ConstrainedSampler`` reads it). ``opening``: the reply's text so
    far while it may still open its block (None once it cannot): the sampler
    asks ``may_open`` before the grammar.
    """

    __slots__ = ("forced", "free", "opening", "_open", "_piece")

    def __init__(self, *, free: bool = False) -> None:
        self.forced: list[int] = []
        self.free = free
        self.opening: str | None = None
        self._open = ""
        self._piece: Callable[[int], bytes] = lambda tok: b""

    def watch_opening(self, tag: str, piece: Callable[[int], bytes]) -> None:
        """The reply may open a block with ``tag``; ``piece`` spells a token."""
        self.opening, self._open, self._piece = "", tag, piece

    def may_open(self, token: int) -> bool:
        if self.opening is None or not self._open:
            return False
        rest = (self.opening + self._piece(token).decode("utf-8", errors="replace")).lstrip(" \t\r\n")
        return bool(rest) and (self._open.startswith(rest) or rest.startswith(self._open))


def generate_step(backend: Backend, pending: Sequence[int], sampler: Sampler,
                  history: list[int], steer: Steering | None = None) -> Generator[tuple[int, bool], None, None]:
    """Prefill ``pending`` then yield ``(token, from_draft=False)`` forever.

    ``history`` holds every token so far (the prompt, then each yielded token
    is appended); penalties read it. The caller stops by not asking for more:
    the token just yielded is forwarded only when the next one is requested,
    so stopping never wastes a forward pass. Tokens the caller put in
    ``steer.forced`` are forwarded with it (and join ``history``), not yielded.
    """
    forced = steer.forced if steer is not None else None
    if forced:
        pending = [*pending, *forced]
        history.extend(forced)
        forced.clear()
    logits = backend.forward(pending)
    while True:
        tok = sampler(history, logits)
        history.append(tok)
        yield tok, False
        if forced:
            feed = [tok, *forced]
            history.extend(forced)
            forced.clear()
            logits = backend.forward(feed)
        else:
            logits = backend.forward((tok,))


def no_steps() -> Generator[tuple[int, bool], None, None]:
    """The step generator of a request stopped before its first token."""
    return
    yield  # the bare yield makes this a generator


def markup_bytes(backend: Backend, layout: Layout | None) -> Callable[[int], bytes]:
    """Each token's bytes as the reasoning parser must see them.

    A backend renders control tokens as nothing (``token_bytes`` gives b"" for
    ``<|channel|>`` or a special ``<think>``), which is right for the text a
    user sees and wrong for a parser that looks for tags. The tokens that are
    the layout's tags (``Layout.tag_ids``) are spelled out, with the backend's
    special-aware piece where it has one (llama.cpp's ``llama_token_to_piece``
    with special=True); every other control token stays invisible, so no
    control token ever reaches the visible text unless the layout places it.
    """
    plain = backend.token_bytes
    if layout is None or not layout.tag_ids:
        return plain
    special = getattr(backend, "special_bytes", None)
    spelled = {tid: (special(tid) if special is not None else b"") or text.encode("utf-8")
               for text, tid in layout.tag_ids.items()}

    def piece(tok: int) -> bytes:
        data = plain(tok)
        if not data:
            return spelled.get(tok, data)
        return data
    return piece


def stream_tokens(backend: Backend, steps: Generator[tuple[int, bool], None, None], *, prompt_len: int, cached: int,
                  params: SamplingParams, stats: GenerationStats, t_start: float,
                  cancel: threading.Event | None = None, spec_stats=None,
                  timeline: Recorder = NO_TIMELINE, t_prefill: float | None = None,
                  layout: Layout | None = None, opened: bool = False,
                  steer: Steering | None = None, tools: ToolPlan | None = None) -> Iterator[StreamEvent]:
    """Turn a token generator into text events, applying every stop rule.

    Works for any step generator with the ``generate_step`` yield shape, so
    speculative decoding can plug in unchanged. ``timeline``'s hooks are the
    plain ones when it records nothing: the loop is the same either way.
    ``t_prefill``: when the prompt's tokens were ready (``t_start`` if not given);
    ``stats.prefill_ms`` runs from it. Every event carries ``stats``: on a delta
    it is the record so far, its live figures kept current (``stats.live()``),
    so no caller counts tokens or times the stream itself.

    ``layout``: the model's reasoning layout (None: every token is answer text);
    ``opened``: the prompt already opened the block (``opens_in_prompt``).
    ``steer``: the reply's link to its step generator and sampler; without it a
    ``params.reasoning_budget`` cannot close the block (the stats say so).
    ``tools``: the request's tools; the answer then goes through a ToolCallParser, complete
    calls come out as "tool_call" events, and a reply that ends with its calls ends
    "tool_calls". A call cut short (max_tokens, Stop) is no call: its text stays answer text.
    """
    parser = ReasoningParser(layout, in_reasoning=opened)
    calls = ToolCallParser(tools) if tools is not None else None
    answer: list[str] = []
    detok_piece = markup_bytes(backend, layout)
    detok = IncrementalDetokenizer(detok_piece, params.stop)
    push, mark = timeline.timed(detok.push), timeline.mark
    eos = frozenset() if params.ignore_eos else backend.eos_ids
    n_ctx = backend.n_ctx
    budget = params.reasoning_budget if layout is not None else None
    closing: list[int] = []
    if budget is not None and layout is not None:
        try:
            closing = backend.tokenize(force_close(layout), add_bos=False, special=True) if steer else []
        except ValueError:
            closing = []
        if not closing:
            stats.notes.append(f"thinking budget of {budget} tokens not applied: "
                               + ("this layout has no way to close its block" if steer else
                                  "this path cannot feed the closing text"))
            budget = None
    if steer is not None:
        steer.free = parser.in_reasoning or (layout is not None and layout.channels)
        if layout is not None and not layout.channels and not steer.free:
            steer.watch_opening(layout.open, detok_piece)
    stats.prompt_tokens = prompt_len
    stats.cached_tokens = cached
    stats.prefill_tokens = prompt_len - cached
    t_prefill = t_start if t_prefill is None else t_prefill
    generated: list[int] = []
    t_first_text = t_first_answer = t_first_tok = t_last_tok = None
    reason = "max_tokens"
    extra = 0  # tokens past max_tokens spent finishing a character
    thinking = 0  # tokens fed while inside the reasoning block

    def events(parsed) -> Iterator[StreamEvent]:
        nonlocal t_first_text, t_first_answer
        for kind, text in parsed:
            if kind == MARKUP:
                if steer is not None and steer.free and not parser.in_reasoning and text.endswith("<|message|>"):
                    steer.free = False  # a Harmony header that opens no analysis: the answer's grammar starts
                continue
            if steer is not None:
                steer.opening = None
            now = time.perf_counter()
            if t_first_text is None:
                t_first_text = now
                stats.ttft_ms = (now - t_start) * 1e3 + stats.queue_wait_ms
            if kind == PARSED_TEXT:
                if t_first_answer is None:
                    t_first_answer = now
                    stats.ttft_answer_ms = (now - t_start) * 1e3 + stats.queue_wait_ms
                if calls is None:
                    yield StreamEvent(TEXT, text, stats=stats)
                else:
                    yield from split_calls(calls.feed(text))
            else:
                yield StreamEvent("reasoning", text, stats=stats)

    def split_calls(parsed) -> Iterator[StreamEvent]:
        assert calls is not None
        for p in parsed:
            if p.kind == "call":
                c = p.call
                yield StreamEvent("tool_call", stats=stats, tool_call=ToolCallDelta(
                    calls.calls.index(c), c.id, c.name,
                    c.arguments))
            elif p.text:
                answer.append(p.text)
                yield StreamEvent(TEXT, p.text, stats=stats)

    def force() -> Iterator[StreamEvent]:
        """The budget is spent: the family's closing text goes in as the next tokens, read, not sampled."""
        assert steer is not None
        steer.forced.extend(closing)
        for t in closing:
            generated.append(t)
            yield from events(parser.feed(-1, push(t)))
        stats.generated_tokens = len(generated)
        stats.notes.append(f"thinking budget of {params.reasoning_budget} tokens reached; closed the block")

    try:
        if budget == 0 and parser.in_reasoning and prompt_len + len(closing) < n_ctx:
            budget = None
            yield from force()
            if not layout.channels:  # type: ignore[union-attr]
                steer.free = parser.in_reasoning  # type: ignore[union-attr]  # force() needs steer
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
            piece = push(tok)
            yield from events(parser.feed(-1, piece))
            if detok.stopped:
                reason = "stop_string"
                break
            if steer is not None and steer.opening is not None:
                steer.opening = None if parser.in_reasoning else steer.opening + piece
            if parser.in_reasoning:
                thinking += 1
                if budget is not None and thinking >= budget and \
                        prompt_len + len(generated) + len(closing) <= n_ctx:
                    budget = None  # once per reply
                    yield from force()
                    if detok.stopped:
                        reason = "stop_string"
                        break
            if steer is not None and not layout.channels:  # type: ignore[union-attr]  # a steer has a layout
                steer.free = parser.in_reasoning
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
        yield from events(parser.feed(-1, tail, count=False))
    yield from events(parser.finish())
    summary = parser.summary
    text, made = summary.text, cast("tuple[ToolCall, ...]", ())
    if calls is not None:
        rest, cut = calls.finish()
        yield from split_calls(rest)
        text = "".join(answer)
        if calls.calls and not cut and reason in ("eos", "stop_string"):
            reason, made = "tool_calls", tuple(calls.calls)
    stats.generated_tokens = len(generated)
    stats.finish_reason = reason
    if spec_stats is not None:
        stats.spec = spec_stats.as_dict()
    t_end = time.perf_counter()
    if t_first_tok is None:  # no token at all: reading the prompt was the whole request
        stats.prefill_ms = (t_end - t_prefill) * 1e3
    stats.finish(t_start=t_start, t_first_text=t_first_text, t_first_token=t_first_tok,
                 t_last_token=t_last_tok, t_end=t_end)
    _reasoning_figures(stats, summary, t_start=t_start, t_last=t_last_tok if t_last_tok is not None else t_end)
    timeline.finish(stats, kv_used=backend.kv_len)
    yield StreamEvent("final", text, finish_reason=reason, stats=stats, token_ids=generated,
                      reasoning=summary.reasoning if summary.had_reasoning else None,
                      reasoning_open=summary.reasoning_unfinished and summary.had_reasoning, tool_calls=made,
                      stop_string=detok.stop_string if reason == "stop_string" else None)


def _reasoning_figures(stats: GenerationStats, summary, *, t_start: float, t_last: float) -> None:
    """The reply's split into reasoning and answer: token counts, the thinking span, each part's tok/s."""
    stats.reasoning_tokens = summary.reasoning_tokens
    # The parser never sees an end-of-generation token: it counts in the part it ended.
    rest = stats.generated_tokens - summary.reasoning_tokens - summary.answer_tokens
    if summary.reasoning_unfinished:
        stats.reasoning_tokens += max(0, rest)
    stats.answer_tokens = stats.generated_tokens - stats.reasoning_tokens
    if summary.had_reasoning and summary.t_reasoning_start is not None:
        end = summary.t_reasoning_end if summary.t_reasoning_end is not None else t_last
        stats.reasoning_at_ms = (summary.t_reasoning_start - t_start) * 1e3 + stats.queue_wait_ms
        stats.reasoning_ms = max(0.0, end - summary.t_reasoning_start) * 1e3
        if stats.reasoning_ms > 0:
            stats.reasoning_tok_s = stats.reasoning_tokens * 1e3 / stats.reasoning_ms
    if summary.t_answer_start is not None and t_last > summary.t_answer_start and stats.answer_tokens > 1:
        stats.answer_tok_s = (stats.answer_tokens - 1) / (t_last - summary.t_answer_start)

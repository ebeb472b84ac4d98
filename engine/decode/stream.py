"""The streaming wrapper around a step generator: tokens in, typed events out.

``stream_tokens`` drives any step generator with ``generate_step``'s yield shape
(plain or speculative) through four stages, each a small object that a test can
drive alone; it is itself a pipeline stage: the step generator's Computes pass
through it to the engine core, and its events go to the reader:

- :class:`ReplyEvents` (reply_events.py): each token's text becomes reasoning, answer and tool-call
  events (the family's layout parsed once, calls split from the answer and given out
  once their section is whole), and the moments the first text and the first answer
  text came; a call that fails its schema sends the reply back to its section's start
  (decode/resample.py) a few times before its text is given back as text;
- :class:`ThinkingBudget` (thinking_budget.py): the most reasoning tokens a reply may spend, after which
  the family's closing text is fed to the model, read, not sampled;
- :class:`StopRules` (stop_rules.py): end of generation, ``max_tokens`` (finishing a cut character),
  Stop, and a context with no room for the next token (a forced tool call is closed within
  that budget by its sampler, call_closing.py, and one that cannot fit ends the reply at once,
  with a note);
- :class:`StatsClock`: when the first and the last token came, and the final figures.

A thinking model's reply is split here, once, for every caller (the window, the
API, agents, other devices: every request runs through the engine core): each token's text goes through the
layout's ``ReasoningParser`` (engine/reply_formats), special tokens spelled out, and
comes out as "reasoning" and "delta" (answer) events; tags and the family's
separators are markup that nobody sees. Stop strings apply to the reply's raw
text, reasoning and tags included, before it is split: that is what llama.cpp's
server and vLLM do (they match stop strings on the generated text and split the
reasoning afterwards), so a stop string behaves the same against Hearth's API.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterable, Iterator, Sequence

from ..errors import Cancelled
from ..reply_formats import Layout
from ..reply_formats.parser import ReplySummary
from ..reply_formats.tools import ToolPlan
from ..types import Compute, SamplingParams, StreamEvent
from .call_closing import NoRoomForCall
from .detokenize import IncrementalDetokenizer
from .generate import Steering, Steps
from .metrics import GenerationStats
from .reply_events import ReplyEvents
from .resample import Redraws, Rewind
from .stop_rules import StopRules
from .thinking_budget import ThinkingBudget
from .timeline import NO_TIMELINE, Recorder

if TYPE_CHECKING:
    from .room import RoomKeeper
    from ..backends.base import Backend, SeqView
    from ..speculative.stats import SpecStats



class StatsClock:
    """The reply's record: prompt and cache counts, when its first and last tokens came,
    and the final figures. ``t_prefill``: when the prompt's tokens were ready (``t_start``
    if not given); ``stats.prefill_ms`` runs from it."""

    def __init__(self, stats: GenerationStats, *, prompt_len: int, cached: int, t_start: float,
                 t_prefill: float | None, timeline: Recorder) -> None:
        self.stats, self.t_start, self.timeline = stats, t_start, timeline
        self.t_prefill = t_start if t_prefill is None else t_prefill
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.mark = timeline.mark
        stats.prompt_tokens = prompt_len
        stats.cached_tokens = cached
        stats.prefill_tokens = prompt_len - cached

    def tick(self, generated: int) -> None:
        """A token came: the reply has ``generated`` tokens now."""
        now = time.perf_counter()
        self.mark(now)
        stats = self.stats
        if self.t_first is None:
            self.t_first = now
            stats.prefill_ms = (now - self.t_prefill) * 1e3
            self.timeline.first_token()
        self.t_last = now
        stats.generated_tokens = generated
        stats.decode_ms = (now - self.t_first) * 1e3

    def finish(self, reason: str, generated: int, events: ReplyEvents, spec_stats: "SpecStats | None",
               kv_used: int) -> None:
        stats = self.stats
        stats.generated_tokens = generated
        stats.finish_reason = reason
        if spec_stats is not None:
            stats.spec = spec_stats.as_dict()
        t_end = time.perf_counter()
        if self.t_first is None:  # no token at all: reading the prompt was the whole request
            stats.prefill_ms = (t_end - self.t_prefill) * 1e3
        stats.finish(t_start=self.t_start, t_first_text=events.t_first_text, t_first_token=self.t_first,
                     t_last_token=self.t_last, t_end=t_end)
        _reasoning_figures(stats, events.summary, t_start=self.t_start,
                           t_last=self.t_last if self.t_last is not None else t_end)
        self.timeline.finish(stats, kv_used=kv_used)


def markup_bytes(backend: "Backend", layout: Layout | None) -> Callable[[int], bytes]:
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


def pull(steps: Steps, notes: list[str]) -> Generator[Compute, Any, tuple[int, bool] | str | None]:
    """The step generator's next ``(token, from_draft)``, its Computes relayed to the engine core on
    the way; what the core throws in reaches the step generator there. None once it ends, "cancelled"
    when Stop was thrown in while it waited; where a forced tool call has no room left to be written
    (call_closing.py), the finish ("max_tokens" or "context_full"), and ``notes`` say so."""
    try:
        item = next(steps)
        while isinstance(item, Compute):
            try:
                logits = yield item
            except BaseException as e:  # noqa: BLE001 - handed to the step generator, which re-raises it
                item = steps.throw(e)
                continue
            item = steps.send(logits)
    except StopIteration:
        return None
    except Cancelled:
        return "cancelled"
    except NoRoomForCall as e:  # no half call: the reply ends here
        notes.append(str(e))
        return e.reason
    return item


def stream_tokens(backend: "Backend", steps: Steps, *, prompt_len: int, cached: int,
                  params: SamplingParams, stats: GenerationStats, t_start: float,
                  cancel: threading.Event | None = None, spec_stats: "SpecStats | None" = None,
                  timeline: Recorder = NO_TIMELINE, t_prefill: float | None = None, layout: Layout | None = None,
                  opened: bool = False, steer: Steering | None = None, tools: ToolPlan | None = None,
                  rewind: Rewind | None = None, kv: "SeqView | None" = None, room: "RoomKeeper | None" = None
                  ) -> Generator[Any, Any, None]:
    """Turn a token generator into text events, applying every stop rule.

    Works for any step generator with the ``generate_step`` yield shape (speculative decoding plugs in
    unchanged). ``timeline``'s hooks are the plain ones when it records nothing: the loop is the same
    either way. Every event carries ``stats``: on a delta it is the record so far, its live figures
    kept current (``stats.live()``), so no caller counts tokens or times the stream.
    ``layout``/``opened``/``tools``: as :class:`ReplyEvents`. ``steer``: the reply's link to its step
    generator and sampler; without it a ``params.reasoning_budget`` cannot close the block (the
    stats say so). ``rewind``: how to draw a failed tool call again (decode/resample.py). ``room``: how a
    reply that fills the context goes on (decode/room.py; None: it ends "context_full")."""
    piece_bytes = markup_bytes(backend, layout)
    text = TextStages(stats, t_start, layout, opened, tools, steer, piece_bytes, params.stop, timeline)
    events, detok, push = text.start()
    budget = ThinkingBudget(backend, layout, params, steer, stats)
    rules = StopRules(backend, params, prompt_len, cancel)
    clock = StatsClock(stats, prompt_len=prompt_len, cached=cached, t_start=t_start, t_prefill=t_prefill,
                       timeline=timeline)
    channels = layout is not None and layout.channels
    if steer is not None:
        steer.free = events.in_reasoning or channels
        if layout is not None and not channels and not steer.free:
            steer.watch_opening(layout.open, piece_bytes)
    generated: list[int] = []
    reason, redraws = "max_tokens", Redraws(rewind, stats)
    try:
        if budget.spent_at_start(events.in_reasoning, rules.room(0)):
            yield from budget.close(generated, push, events)
            if not channels:
                steer.free = events.in_reasoning  # type: ignore[union-attr]  # a budget is applied with a steer
        while True:
            got = yield from pull(steps, stats.notes)
            if not isinstance(got, tuple):  # the steps ended, or Stop came while the reply waited
                reason = got or reason
                break
            tok, _from_draft = got
            generated.append(tok)
            clock.tick(len(generated))
            if tok in rules.eos:
                reason = "eos"
                break
            piece = push(tok)
            yield from events.feed(piece)
            if events.failed is not None:
                if redraws.left():  # the failed call's section drawn again, from where it began
                    kept = events.rewind_point()
                    steps = redraws.again(steps, kept)
                    del generated[kept:]
                    events, detok, push = text.start(events, generated)
                    continue
                yield from events.give_up()
            if detok.stopped:
                reason = "stop_string"
                break
            if steer is not None and steer.opening is not None:
                steer.opening = None if events.in_reasoning else steer.opening + piece
            if budget.spent(events.in_reasoning, rules.room(len(generated))):
                yield from budget.close(generated, push, events)
                if detok.stopped:
                    reason = "stop_string"
                    break
            if steer is not None and not channels:
                steer.free = events.in_reasoning
            why = rules.after(len(generated), detok)
            steps, why = room.check(steps, generated, rules, redraws) if why is None and room else (steps, why)
            if why is not None:
                reason = why
                break
    finally:
        steps.close()
    if not generated and cancel is not None and cancel.is_set():
        reason = "cancelled"  # stopped before the first token (during the prompt's prefill)
    yield from _closing(events, detok, timeline, reason)
    yield from _final(events, detok, clock, reason, generated, spec_stats, (kv or backend).kv_len)


def _closing(events: ReplyEvents, detok: IncrementalDetokenizer, timeline: Recorder,
             reason: str) -> Iterator[StreamEvent]:
    """The text held back at the end (a partial stop string that never completed), then the parsers' last events."""
    tail = timeline.timed_flush(detok.flush)()
    if tail:
        yield from events.feed(tail, count=False)
    yield from events.finish()


def _final(events: ReplyEvents, detok: IncrementalDetokenizer, clock: StatsClock, reason: str,
           generated: list[int], spec_stats: "SpecStats | None", kv_used: int) -> Iterator[StreamEvent]:
    """The reply settled (its calls, or a failed call's text), its figures, and the final event."""
    last, text, reason, made = events.settle(reason)
    yield from last
    clock.finish(reason, len(generated), events, spec_stats, kv_used=kv_used)
    stats, summary = clock.stats, events.summary
    yield StreamEvent("final", text, finish_reason=reason, stats=stats, token_ids=generated,
                      reasoning=summary.reasoning if summary.had_reasoning else None,
                      reasoning_open=summary.reasoning_unfinished and summary.had_reasoning, tool_calls=made,
                      stop_string=detok.stop_string if reason == "stop_string" else None)


@dataclass
class TextStages:
    """How one draw's tokens become text events: the reply's events and its detokenizer (stop
    strings), made anew when a failed tool call's section is drawn again."""
    stats: GenerationStats
    t_start: float
    layout: Layout | None
    opened: bool
    tools: ToolPlan | None
    steer: Steering | None
    piece_bytes: Callable[[int], bytes]
    stop: Sequence[str]
    timeline: Recorder

    def start(self, before: ReplyEvents | None = None,
              kept: Iterable[int] = ()) -> tuple[ReplyEvents, IncrementalDetokenizer, Callable[[int], str]]:
        """New stages, with ``kept`` (a rewound reply's tokens) read again into them unseen."""
        ev = ReplyEvents(self.stats, self.t_start, layout=self.layout, opened=self.opened, tools=self.tools,
                         steer=self.steer)
        if before is not None:  # the moments already measured stay
            ev.t_first_text, ev.t_first_answer = before.t_first_text, before.t_first_answer
        dt = IncrementalDetokenizer(self.piece_bytes, self.stop)
        push = self.timeline.timed(dt.push)
        for t in kept:
            list(ev.feed(push(t)))
        return ev, dt, push


def _reasoning_figures(stats: GenerationStats, summary: ReplySummary, *, t_start: float, t_last: float) -> None:
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

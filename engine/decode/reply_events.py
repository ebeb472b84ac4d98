"""Each token's text as reply events: reasoning, answer and tool calls (``stream.stream_tokens``'s
first stage).

The family's layout is parsed once (engine/reply_formats' ``ReasoningParser``); a tool call's
section is split from the answer and its calls given out once the section is whole; a call that
fails its schema marks the reply ``failed``, for the stream to draw its section again
(decode/resample.py) or to give it back as text with the reason. The moments the first text and
the first answer text came are kept for the stats.
"""
from __future__ import annotations

import bisect
import time
from typing import Iterable, Iterator

from ..reply_formats import Layout, ReasoningParser
from ..reply_formats.parser import MARKUP, TEXT as PARSED_TEXT, Event, ReplySummary
from ..reply_formats.tool_parser import Parsed, ToolCallError, ToolCallParser
from ..reply_formats.tools import ToolPlan
from ..prompt.messages import ToolCall, ToolCallDelta
from ..types import TEXT, StreamEvent
from .generate import Steering
from .metrics import GenerationStats
from .resample import RESAMPLES


class ReplyEvents:
    """A reply's text as events: reasoning apart from the answer, tool calls apart from text.

    ``layout``: the model's reasoning layout (None: every token is answer text);
    ``opened``: the prompt already opened the block (``opens_in_prompt``). ``tools``: the
    request's tools; the answer then goes through a ToolCallParser and complete calls come
    out as "tool_call" events. ``steer``: told when the reply leaves a Harmony header that
    opens no analysis (its grammar starts there) and when it can no longer open a block.
    """

    def __init__(self, stats: GenerationStats, t_start: float, *, layout: Layout | None = None,
                 opened: bool = False, tools: ToolPlan | None = None, steer: Steering | None = None) -> None:
        self.stats = stats
        self.t_start = t_start
        self.steer = steer
        self.parser = ReasoningParser(layout, in_reasoning=opened)
        self.calls = ToolCallParser(tools) if tools is not None else None
        self.answer: list[str] = []  # the answer's text pieces, once tool calls are split out
        self.t_first_text: float | None = None
        self.t_first_answer: float | None = None
        self.failed: str | None = None  # why the call section's last call failed its schema
        self._pending: list[StreamEvent] = []  # calls of the open section, given out when it is whole
        self._fed: list[int] = []  # characters the call parser had after each token of the reply

    @property
    def in_reasoning(self) -> bool:
        return self.parser.in_reasoning

    def feed(self, piece: str, *, count: bool = True) -> Iterator[StreamEvent]:
        """The events of one token's text (``count``: it is a token of the reply, not a flushed tail)."""
        out = list(self._events(self.parser.feed(-1, piece, count=count)))
        if count and self.calls is not None:
            self._fed.append(self.calls.fed)
        return iter(out)

    def rewind_point(self) -> int:
        """How many of the reply's tokens to keep to sample its call section again: those before the
        token its opener began in."""
        assert self.calls is not None and self.calls.section_start is not None
        return bisect.bisect_right(self._fed, self.calls.section_start)

    def give_up(self) -> Iterator[StreamEvent]:
        """The section failed every draw: its text from the failed call on is answer text, and the
        reply's notes say why; the calls before it in the section stand."""
        assert self.calls is not None
        text = self.calls.abandon()
        self.stats.notes.append(f"a tool call did not match its schema after {RESAMPLES + 1} tries "
                                f"({self.failed}); it is shown as the model wrote it, not run")
        self.failed = None
        yield from self._flush()
        if text:
            self.answer.append(text)
            yield StreamEvent(TEXT, text, stats=self.stats)

    def finish(self) -> Iterator[StreamEvent]:
        """The events of whatever the parser held back until the end."""
        return self._events(self.parser.finish())

    def settle(self, reason: str) -> tuple[list[StreamEvent], str, str, tuple[ToolCall, ...]]:
        """The stream ended with ``reason``: the last tool-call events, the answer text, the finish
        reason (a reply that ends with complete calls ends "tool_calls") and the calls made. A call
        cut short (max_tokens, Stop) is no call: its text stays answer text."""
        text = self.parser.summary.text
        if self.calls is None:
            return [], text, reason, ()
        try:
            rest, cut = self.calls.finish()
            tail = list(self._split_calls(rest)) + list(self._flush())
        except ToolCallError as e:  # a call that fails only once the reply ended: too late to draw again
            self.failed = str(e)
            tail = list(self.give_up())
            rest, cut = self.calls.finish()
            tail += list(self._split_calls(rest)) + list(self._flush())
        if self.calls.calls and not cut and reason in ("eos", "stop_string"):
            return tail, "".join(self.answer), "tool_calls", tuple(self.calls.calls)
        return tail, "".join(self.answer), reason, ()

    @property
    def summary(self) -> ReplySummary:
        return self.parser.summary

    def _events(self, parsed: Iterable[Event]) -> Iterator[StreamEvent]:
        steer, stats = self.steer, self.stats
        for kind, text in parsed:
            if kind == MARKUP:
                if steer is not None and steer.free and not self.parser.in_reasoning and \
                        text.endswith("<|message|>"):
                    steer.free = False  # a Harmony header that opens no analysis: the answer's grammar starts
                continue
            if steer is not None:
                steer.opening = None
            now = time.perf_counter()
            if self.t_first_text is None:
                self.t_first_text = now
                stats.ttft_ms = (now - self.t_start) * 1e3 + stats.queue_wait_ms
            if kind == PARSED_TEXT:
                if self.t_first_answer is None:
                    self.t_first_answer = now
                    stats.ttft_answer_ms = (now - self.t_start) * 1e3 + stats.queue_wait_ms
                if self.calls is None:
                    yield StreamEvent(TEXT, text, stats=stats)
                elif self.failed is None:
                    try:
                        pieces = self.calls.feed(text)
                    except ToolCallError as e:  # the reply goes back and samples the section again
                        self.failed = str(e)
                        continue
                    yield from self._split_calls(pieces)
            else:
                yield StreamEvent("reasoning", text, stats=stats)

    def _split_calls(self, parsed: Iterable[Parsed]) -> Iterator[StreamEvent]:
        calls = self.calls
        assert calls is not None
        for p in parsed:
            if p.kind == "call":
                c = p.call
                assert c is not None  # a "call" piece carries its call
                self._pending.append(StreamEvent("tool_call", stats=self.stats, tool_call=ToolCallDelta(
                    calls.calls.index(c), c.id, c.name, c.arguments)))
            elif p.text:
                yield from self._flush()
                self.answer.append(p.text)
                yield StreamEvent(TEXT, p.text, stats=self.stats)
        if not calls.in_section:
            yield from self._flush()

    def _flush(self) -> Iterator[StreamEvent]:
        out, self._pending = self._pending, []
        yield from out

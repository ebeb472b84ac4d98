"""One streaming parser for every family's reply: reasoning apart from the answer.

It is fed each generated token's id and text (special tokens included, as the
caller decodes them) and returns events: ``("reasoning", s)``, ``("text", s)``
and ``("markup", s)``. Markup is what the layout writes around the content
(tags, Harmony headers, the newlines a family puts next to a tag); nobody shows
it, but it is reported so that the events always add up to every character fed:
``"".join(text for _, text in events) == "".join(pieces)``.

The rules, whatever the family:
- a tag split across tokens is never shown half: a tail that could still grow
  into a tag is held back until it is decided;
- a block still open when the stream ends (max_tokens, Stop) stays reasoning,
  and the summary says it is unfinished;
- a reply with no reasoning is just an answer;
- text the parser cannot place (a stray close tag, a broken Harmony header) is
  answer text, never dropped.

A reasoning block is recognised only at the start of the reply (after leading
whitespace), where every family writes it; a ``<think>`` later in an answer is
the model talking about tags.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from .layouts import Layout

TEXT, REASONING, MARKUP = "text", "reasoning", "markup"

_HARMONY_ENDS = ("<|end|>", "<|return|>", "<|call|>")
_HARMONY_STARTS = ("<|start|>", "<|channel|>")
_HARMONY_MESSAGE = "<|message|>"
_MAX_HEADER = 512  # a header longer than this is not a header; its text is shown
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
_PARTIAL_HEADER = re.compile(r"(<\|start\|>[A-Za-z_]*)?(<\|channel\|>[^<]*)?(<\|constrain\|>[^<]*)?")
_HEADER_TOKENS = ("<|start|>", "<|channel|>", "<|constrain|>", "<|message|>")
_LEADING_SPACE = " \t\r\n"


class Event(NamedTuple):
    """One piece of the reply: ``kind`` is "text", "reasoning" or "markup"."""

    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class ReplySummary:
    """The whole reply once the stream ended.

    ``reasoning_tokens`` counts the tokens fed while inside (or opening, or
    closing) a reasoning block; ``answer_tokens`` the rest. The ``t_*`` marks
    come from the parser's clock, ``None`` where that moment never happened.
    """

    reasoning: str
    text: str
    reasoning_unfinished: bool
    reasoning_tokens: int
    answer_tokens: int
    had_reasoning: bool
    t_reasoning_start: float | None = None
    t_reasoning_end: float | None = None
    t_answer_start: float | None = None


def held(buf: str, tags: Iterable[str]) -> int:
    """Length of the longest tail of ``buf`` that is a proper prefix of one of ``tags``."""
    best = 0
    for tag in tags:
        for n in range(min(len(buf), len(tag) - 1), best, -1):
            if tag.startswith(buf[-n:]):
                best = n
                break
    return best


# Regions of the reply. START, OUTSIDE and HEADER are undecided: tokens fed
# there are counted once the parser knows what they led to. BODY is a Harmony
# message body, whose kind (reasoning or text) its header named.
_START, _REASONING, _ANSWER, _OUTSIDE, _HEADER, _BODY = range(6)
_UNDECIDED = (_START, _OUTSIDE, _HEADER)


class ReasoningParser:
    """Split one reply's token stream by ``layout``; ``None`` means no reasoning layout.

    ``in_reasoning``: the prompt already opened the block (see
    ``opens_in_prompt``), so the reply starts as reasoning. Call ``feed`` for
    each token and ``finish`` once at the end; ``summary`` is then ready.
    """

    def __init__(self, layout: Layout | None, *, in_reasoning: bool = False,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.layout = layout
        self._tag_of = {tid: text for text, tid in layout.tag_ids.items()} if layout is not None else {}
        self._clock = clock
        self._buf = ""
        self._kind = TEXT                 # a Harmony message body's kind
        self._lead = False                # strip the family's trim characters next
        self._fresh = False               # prompt-opened: the model may still repeat the open tag
        self._had = False
        self._ended = False
        self._reasoning: list[str] = []
        self._text: list[str] = []
        self._pending = 0
        self._touched = False
        self._n_reasoning = 0
        self._n_answer = 0
        self._t: dict[str, float] = {}
        self._last: str | None = None     # the kind of the last event
        self._summary: ReplySummary | None = None
        if layout is None:
            self._region = _ANSWER
        elif layout.channels:
            self._region = _OUTSIDE
            if in_reasoning:
                self._enter_body(REASONING)
        elif in_reasoning:
            self._enter_reasoning()
            self._fresh = True
        else:
            self._region = _START

    # -- public ---------------------------------------------------------------

    @property
    def in_reasoning(self) -> bool:
        """True while the reply is inside a reasoning block (a budget counts these tokens)."""
        return self._region == _REASONING or (self._region == _BODY and self._kind == REASONING)

    @property
    def summary(self) -> ReplySummary:
        if self._summary is None:
            raise RuntimeError("the reply is not finished: call finish() first")
        return self._summary

    def feed(self, token_id: int, piece: str, *, count: bool = True) -> list[Event]:
        """One token: its id and its text, special tokens spelled out.

        The tags are matched as text. A tag that is one token of the vocabulary
        (``Layout.tag_ids``) but comes with an empty piece, from a detokenizer
        that renders control tokens as nothing, is spelled from its id.
        ``count=False``: more text of tokens already fed (a detokenizer's held-back
        tail at the end of the stream), not a token of its own.
        """
        if self._ended:
            raise RuntimeError("feed() after finish()")
        if not piece:
            piece = self._tag_of.get(token_id, "")
        self._touched = self.in_reasoning
        out: list[Event] = []
        self._buf += piece
        self._run(out)
        self._pending += count
        if self._touched:
            self._n_reasoning += self._pending
            self._pending = 0
        elif self._region not in _UNDECIDED:
            self._n_answer += self._pending
            self._pending = 0
        return out

    def finish(self) -> list[Event]:
        """End of stream: release what is held and fill in ``summary``."""
        if self._ended:
            return []
        self._ended = True
        out: list[Event] = []
        buf, self._buf = self._buf, ""
        unfinished = self.in_reasoning
        if self._region == _REASONING:
            body = buf.rstrip(self._trim)
            self._emit(out, REASONING, body)
            self._emit(out, MARKUP, buf[len(body):])
        elif self._region == _HEADER and _cut_header(buf) or (
                self._region == _OUTSIDE and self._last in (None, MARKUP)
                and any(t.startswith(buf) for t in _HARMONY_STARTS)):
            self._emit(out, MARKUP, buf)   # a header cut short, where the format put the next one
        elif self._region == _BODY:
            self._emit(out, self._kind, buf)
        else:
            self._emit(out, TEXT, buf)
        self._n_answer += self._pending
        self._pending = 0
        self._summary = ReplySummary(
            reasoning="".join(self._reasoning), text="".join(self._text),
            reasoning_unfinished=unfinished, reasoning_tokens=self._n_reasoning,
            answer_tokens=self._n_answer, had_reasoning=self._had,
            t_reasoning_start=self._t.get("reasoning"), t_reasoning_end=self._t.get("end"),
            t_answer_start=self._t.get("text"))
        return out

    # -- states ---------------------------------------------------------------

    @property
    def _trim(self) -> str:
        return self.layout.trim if self.layout is not None else ""

    def _emit(self, out: list[Event], kind: str, text: str) -> None:
        if not text:
            return
        if kind != MARKUP and kind not in self._t:
            self._t[kind] = self._clock()
        self._last = kind
        if kind == REASONING:
            self._reasoning.append(text)
        elif kind == TEXT:
            self._text.append(text)
        if out and out[-1].kind == kind:
            out[-1] = Event(kind, out[-1].text + text)
        else:
            out.append(Event(kind, text))

    def _enter_reasoning(self) -> None:
        self._region, self._lead, self._had, self._touched = _REASONING, True, True, True

    def _close_reasoning(self) -> None:
        self._region, self._lead = _ANSWER, True
        self._t.setdefault("end", self._clock())

    def _enter_body(self, kind: str) -> None:
        self._region, self._kind = _BODY, kind
        if kind == REASONING:
            self._had = self._touched = True

    def _run(self, out: list[Event]) -> None:
        step = self._harmony_step if self.layout is not None and self.layout.channels else self._tags_step
        while self._buf and step(out):
            pass

    def _tags_step(self, out: list[Event]) -> bool:
        """Advance the tags shape; False when the rest must wait for more text."""
        assert self.layout is not None or self._region == _ANSWER
        buf = self._buf
        if self._region == _START:
            assert self.layout is not None
            rest = buf.lstrip(_LEADING_SPACE)
            if rest.startswith(self.layout.open):
                cut = len(buf) - len(rest) + len(self.layout.open)
                self._emit(out, MARKUP, buf[:cut])
                self._buf = buf[cut:]
                self._enter_reasoning()
                return True
            if self.layout.open.startswith(rest):
                return False                  # whitespace or half a tag: wait
            self._region, self._lead = _ANSWER, False
            return True
        if self._region == _REASONING:
            assert self.layout is not None
            if self._lead:
                body = buf.lstrip(self._trim)
                self._emit(out, MARKUP, buf[:len(buf) - len(body)])
                self._buf = buf = body
                if self._fresh:               # the prompt opened it; the model wrote it again
                    if buf.startswith(self.layout.open):
                        self._emit(out, MARKUP, self.layout.open)
                        self._buf = buf[len(self.layout.open):]
                        self._fresh = False
                        return True
                    if self.layout.open.startswith(buf):
                        return False
                if not buf:
                    return False
                self._lead = self._fresh = False
            close = self.layout.close
            i = buf.find(close)
            if i >= 0:
                body = buf[:i].rstrip(self._trim)
                self._emit(out, REASONING, body)
                self._emit(out, MARKUP, buf[len(body):i + len(close)])
                self._buf = buf[i + len(close):]
                self._close_reasoning()
                return True
            hold = held(buf, (close,))
            safe = buf[:len(buf) - hold]
            body = safe.rstrip(self._trim)
            self._emit(out, REASONING, body)
            self._buf = buf[len(body):]
            return False
        # the answer: only the family's separator right after the block is markup
        if self._lead:
            body = buf.lstrip(self._trim)
            self._emit(out, MARKUP, buf[:len(buf) - len(body)])
            buf = body
            if not buf:
                self._buf = ""
                return False
            self._lead = False
        self._emit(out, TEXT, buf)
        self._buf = ""
        return False

    def _harmony_step(self, out: list[Event]) -> bool:
        """Advance the Harmony shape; False when the rest must wait for more text."""
        buf = self._buf
        if self._region == _OUTSIDE:
            if buf.startswith(_HARMONY_STARTS):
                self._region = _HEADER
                return True
            if any(t.startswith(buf) for t in _HARMONY_STARTS):
                return False
            # Text outside any message: the model broke the format. Show it.
            j = min((k for t in _HARMONY_STARTS if (k := buf.find(t, 1)) > 0), default=-1)
            if j < 0:
                j = len(buf) - held(buf, _HARMONY_STARTS)
            self._emit(out, TEXT, buf[:j])
            self._buf = buf[j:]
            return j < len(buf) and buf.startswith(_HARMONY_STARTS, j)
        if self._region == _HEADER:
            i = buf.find(_HARMONY_MESSAGE)
            head = buf if i < 0 else buf[:i]
            cut = _header_break(head)
            if cut is None and i < 0 and len(head) > _MAX_HEADER:
                cut = len(head)
            if cut is not None:                # not a header after all: show it
                self._emit(out, TEXT, buf[:cut])
                self._buf, self._region = buf[cut:], _OUTSIDE
                return True
            if i < 0:
                return False
            header = buf[:i + len(_HARMONY_MESSAGE)]
            m = _CHANNEL.search(header)
            self._emit(out, MARKUP, header)
            self._buf = buf[len(header):]
            self._enter_body(REASONING if m is not None and m.group(1) == "analysis" else TEXT)
            return True
        # a message body, up to its end token or the next header
        stops = [(k, t) for t in (*_HARMONY_ENDS, *_HARMONY_STARTS) if (k := buf.find(t)) >= 0]
        if stops:
            k, tag = min(stops)
            self._emit(out, self._kind, buf[:k])
            if tag in _HARMONY_ENDS:
                self._emit(out, MARKUP, tag)
                k += len(tag)
            self._buf = buf[k:]
            if self._kind == REASONING:
                self._t.setdefault("end", self._clock())
            self._region, self._kind = _OUTSIDE, TEXT
            return True
        hold = held(buf, (*_HARMONY_ENDS, *_HARMONY_STARTS))
        self._emit(out, self._kind, buf[:len(buf) - hold])
        self._buf = buf[len(buf) - hold:]
        return False


def _cut_header(buf: str) -> bool:
    """Whether ``buf`` is a Harmony header stopped short (maybe inside one of its tokens)."""
    return _PARTIAL_HEADER.fullmatch(buf[:len(buf) - held(buf, _HEADER_TOKENS)]) is not None


def _header_break(head: str) -> int | None:
    """Where a would-be Harmony header stops being one, or None while it still could be.

    A header holds at most one ``<|start|>`` (first) and one ``<|channel|>``,
    and no end token.
    """
    cuts = [k for t in _HARMONY_ENDS if (k := head.find(t)) >= 0]
    cuts += [k for k in (head.find("<|start|>", 1),) if k > 0]
    first = head.find("<|channel|>")
    if first >= 0 and (k := head.find("<|channel|>", first + 1)) > 0:
        cuts.append(k)
    return min(cuts, default=None)


def parse_reply(layout: Layout | None, text: str, *, in_reasoning: bool = False) -> ReplySummary:
    """Split a whole reply's text at once (old stored replies, tests); one 'token' for all of it."""
    parser = ReasoningParser(layout, in_reasoning=in_reasoning, clock=lambda: 0.0)
    parser.feed(0, text)
    parser.finish()
    return parser.summary


def force_close(layout: Layout) -> str:
    """The text to append to end a reasoning block early, the way the family closes one."""
    if not layout.force_close:
        raise ValueError(f"the {layout.name} layout has no way to close a reasoning block")
    return layout.force_close


def opens_in_prompt(layout: Layout | None, prompt: str) -> bool:
    """Whether ``prompt`` (the rendered chat, generation prompt included) ends inside an open block."""
    if layout is None:
        return False
    tail = prompt.rstrip(_LEADING_SPACE)
    if layout.channels:
        return tail.endswith("<|channel|>analysis" + _HARMONY_MESSAGE)
    i = tail.rfind(layout.open)
    return i >= 0 and i + len(layout.open) == len(tail)

"""A reply's thinking budget: the most reasoning tokens it may spend, then the block closed.

One of the stages ``stream_tokens`` (stream.py) drives a reply through: once the budget is spent while
the reply is inside its reasoning block, the family's closing text goes in as the next tokens, read,
not sampled, and is parsed like any other text the model wrote.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from ..reply_formats.layouts import Layout
from ..reply_formats.parser import force_close
from ..types import SamplingParams, StreamEvent
from .generate import Steering
from .metrics import GenerationStats
from .reply_events import ReplyEvents

if TYPE_CHECKING:
    from ..backends.base import Backend


class ThinkingBudget:
    """The most reasoning tokens one reply may spend (``params.reasoning_budget``).

    When it is spent, the family's closing text (``force_close``) goes in as the next
    tokens, read, not sampled: ``steer.forced`` hands them to the step generator. Without
    a ``steer`` (a path that cannot feed them) or a layout that cannot close its block,
    the budget is not applied and the reply's notes say so.
    """

    def __init__(self, backend: "Backend", layout: Layout | None, params: SamplingParams,
                 steer: Steering | None, stats: GenerationStats) -> None:
        self.params, self.steer, self.stats = params, steer, stats
        self.budget = params.reasoning_budget if layout is not None else None
        self.closing: list[int] = []
        self.thinking = 0  # tokens fed while inside the reasoning block
        if self.budget is not None and layout is not None:
            try:
                self.closing = backend.tokenize(force_close(layout), add_bos=False, special=True) if steer else []
            except ValueError:
                self.closing = []
            if not self.closing:
                stats.notes.append(f"thinking budget of {self.budget} tokens not applied: "
                                   + ("this layout has no way to close its block" if steer else
                                      "this path cannot feed the closing text"))
                self.budget = None

    def spent_at_start(self, in_reasoning: bool, room: int) -> bool:
        """A budget of 0 in a prompt that opened the block: close it before the first token.
        ``room``: the context's free positions after the prompt."""
        if self.budget == 0 and in_reasoning and len(self.closing) < room:
            self.budget = None
            return True
        return False

    def spent(self, in_reasoning: bool, room: int) -> bool:
        """After a token: True, once per reply, when the budget is spent now and the closing
        text fits in the ``room`` left."""
        if not in_reasoning:
            return False
        self.thinking += 1
        if self.budget is not None and self.thinking >= self.budget and len(self.closing) <= room:
            self.budget = None
            return True
        return False

    def close(self, generated: list[int], push: Callable[[int], str], events: ReplyEvents) -> Iterator[StreamEvent]:
        """Feed the closing text: each token joins the reply and its text is parsed like any other."""
        assert self.steer is not None  # a budget without a steer was never applied
        self.steer.forced.extend(self.closing)
        for t in self.closing:
            generated.append(t)
            yield from events.feed(push(t))
        self.stats.generated_tokens = len(generated)
        self.stats.notes.append(f"thinking budget of {self.params.reasoning_budget} tokens reached; "
                                "closed the block")

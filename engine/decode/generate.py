"""The decode loop: ``generate_step``, forward, sample, yield.

It is the whole hot loop of one sequence. Its forward is a :class:`~engine.types.Compute`
it yields to the engine core, which runs it in the step's one batch beside every
other sequence's rows and sends the logits back; ``drive`` runs a step generator on
a backend of its own instead (a test, a benchmark's bare loop). Everything else
(detokenizing, stop strings, reasoning, cancel, timing) wraps it from outside
(stream.py), so the loop itself never branches on mode or backend.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Sequence

import numpy as np

from ..types import WANT_ALL, WANT_LAST, Compute

if TYPE_CHECKING:
    from ..backends.base import Backend

Sampler = Callable[[Sequence[int], np.ndarray], int]
# A step generator: yields Compute (sent its logits back) and (token, from_draft) pairs.
Steps = Generator[Any, Any, None]


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


def generate_step(pending: Sequence[int], sampler: Sampler, history: list[int],
                  steer: Steering | None = None, *, prompt: bool = True) -> Steps:
    """Feed ``pending`` then yield ``(token, from_draft=False)`` forever.

    ``history`` holds every token so far (the prompt, then each yielded token
    is appended); penalties read it. The caller stops by not asking for more:
    the token just yielded is forwarded only when the next one is requested,
    so stopping never wastes a forward pass. Tokens the caller put in
    ``steer.forced`` are forwarded with it (and join ``history``), not yielded.
    ``prompt``: ``pending`` is the prompt's rest (read in chunks by priority),
    not a token to feed again.
    """
    forced = steer.forced if steer is not None else None
    if forced:
        pending = [*pending, *forced]
        history.extend(forced)
        forced.clear()
    logits = yield Compute(list(pending), WANT_LAST, prompt=prompt and len(pending) > 1)
    while True:
        tok = sampler(history, logits)
        history.append(tok)
        yield tok, False
        if forced:
            feed = [tok, *forced]
            history.extend(forced)
            forced.clear()
            logits = yield Compute(feed)
        else:
            logits = yield Compute([tok])


def no_steps() -> Steps:
    """The step generator of a request stopped before its first token."""
    return
    yield  # the bare yield makes this a generator


def drive(backend: "Backend", gen: Generator[Any, Any, Any]) -> Iterator[Any]:
    """Run a pipeline or step generator on ``backend``'s own (first) sequence, outside the engine
    core: each Compute is a forward there; everything else it yields is yielded on. Its return
    value, if any, is lost (``yield from drive(...)`` is for generators that return nothing)."""
    try:
        item = next(gen)
        while True:
            if isinstance(item, Compute):
                t0 = time.perf_counter()
                logits = backend.forward(item.tokens, all_logits=item.want == WANT_ALL)
                item.spent_s += time.perf_counter() - t0
                item = gen.send(logits)
            else:
                yield item
                item = next(gen)
    except StopIteration:
        return

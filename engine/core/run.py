"""A request in the engine core, and its pipeline driven from one Compute to the next.

A :class:`Run` is queued, or holds a sequence of the pool and runs its pipeline
(engine/core/reply.py) on the core's thread: ``advance`` sends the pipeline what
it waited for (logits, or an error such as Stop) and runs it to its next Compute,
posting the events it yields to the reader's handle on the way.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from ..decode.metrics import GenerationStats
from ..errors import HearthError
from ..types import Compute, StreamEvent
from .job import Handle, Job
from .lease import TrackedView

log = logging.getLogger("hearth.core")

Ended = Callable[["Run", "BaseException | None"], None]


class Run:
    """A request in the core: queued, or holding a sequence and running its pipeline."""

    __slots__ = ("job", "handle", "seq", "view", "pipe", "want", "admitted", "wait_for", "cached", "held",
                 "parked")

    def __init__(self, job: Job, handle: Handle) -> None:
        self.job, self.handle = job, handle
        self.seq: int | None = None
        self.view: TrackedView | None = None
        self.pipe: Any = None
        self.want: Compute | None = None   # what the pipeline waits for
        self.admitted = 0.0
        self.cached = 0  # prompt tokens its sequence held when it started
        # (sequence, tokens): another request is still reading this one's prompt's first tokens there;
        # it starts once they are read, from a copy, instead of reading them a second time.
        self.wait_for: tuple[int, int] | None = None
        # Preempted (its sequence given to a more urgent request): the tokens its sequence held, which it
        # gets back before its pipeline goes on; while they are read again, its pipeline's own pending
        # compute waits here.
        self.held: list[int] | None = None
        self.parked: Compute | None = None

    @property
    def suspended(self) -> bool:
        """Preempted and waiting in the queue with its pipeline part-way."""
        return self.pipe is not None and self.seq is None

    def advance(self, value: Any, ended: Ended, *, start: bool = False, error: BaseException | None = None) -> None:
        """Run the pipeline to its next Compute, posting its events; ``ended(run, error)`` once it returns
        or fails (a bug ends its request with a message, and a traceback in the log, not the core)."""
        pipe = self.pipe
        try:
            if start:
                item = next(pipe)
            elif error is not None:
                item = pipe.throw(error)
            else:
                item = pipe.send(value)
            while not isinstance(item, Compute):
                if isinstance(item, StreamEvent):
                    self.handle.put(item)
                item = next(pipe)
        except StopIteration:
            ended(self, None)
            return
        except HearthError as e:
            ended(self, e)
            return
        except Exception as e:
            log.exception("a request's pipeline failed")
            ended(self, HearthError(f"the request failed: {type(e).__name__}: {e}"))
            return
        if not item.tokens:
            ended(self, HearthError("a pipeline asked to compute no tokens"))
            return
        self.want = item

    def throw(self, error: BaseException, ended: Ended) -> None:
        """Raise ``error`` in the pipeline where it waits (it ends, or goes on if it handles it)."""
        if self.pipe is None or self.want is None:
            return
        self.want = None
        self.advance(None, ended, error=error)


class AllCancelled:
    """The abort flag of a step that only reads prompts: set once every request in it is stopped."""

    def __init__(self, runs: list[Run]) -> None:
        self.flags = [r.job.cancel for r in runs]

    def is_set(self) -> bool:
        return all(f.is_set() for f in self.flags)


def cancelled_before_start(handle: Handle) -> None:
    """A request stopped while it waited: its one event says so."""
    handle.put(StreamEvent("final", "", finish_reason="cancelled", stats=GenerationStats(finish_reason="cancelled")))
    handle.end()

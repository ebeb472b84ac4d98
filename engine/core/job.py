"""What a caller submits to the engine core, and the handle it reads the reply from.

A :class:`Job` is one request made ready to run: its prompt tokens (where the KV
placement looks for a prefix to reuse), its priority class, its Stop flag, and how
to build its pipeline once it holds a sequence of the pool. The :class:`Handle` is
the reader's side: the reply's events in order, the prompt's reading progress, and
an error where the request failed; any thread may read it or cancel it.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Callable, Iterator

from ..errors import HearthError
from ..types import StreamEvent

if TYPE_CHECKING:
    from ..decode.generate import Steps
    from .lease import SeqLease


class Priority(IntEnum):
    """Lower runs first. The window's reply before any API request; an interactive API request
    (a person or an agent waiting) before background work (titles, summaries, batch jobs). A
    request's class rises while it waits (aging), never above INTERACTIVE."""
    WINDOW = 0
    INTERACTIVE = 1
    API = 1          # an API request's default: interactive
    BACKGROUND = 2


class QueueTimeout(HearthError):
    """A request waited past its maximum for a sequence to start on; try again after
    ``retry_after_s`` (the server answers 503 with Retry-After)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(slots=True, frozen=True)
class Progress:
    """Prompt tokens read so far, of ``total``: reported between a long prompt's chunks."""
    done: int
    total: int


@dataclass(eq=False)
class Job:
    """One request for the core. ``make(lease)`` builds its pipeline on the core's thread once the
    request holds a sequence (``lease``: which, and what of its prompt the KV already held)."""
    prompt: list[int]
    make: Callable[["SeqLease"], "Steps"]
    priority: int = Priority.WINDOW
    cancel: threading.Event = field(default_factory=threading.Event)
    max_wait_s: float | None = None   # past this in the queue: QueueTimeout (None: wait as long as it takes)
    label: str = ""                   # who asked (a device key's name), for the core's figures
    shift: bool = False               # its KV may be moved into place (the "shift" context policy)
    submitted: float = field(default_factory=time.perf_counter)


_END = object()


class Handle:
    """The reader's side of a submitted job: read ``events()``, or ``cancel()``, from any thread."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Event()
        self.admitted: float | None = None  # when it got its sequence (perf_counter)
        self.on_cancel: Callable[[], None] = lambda: None  # wakes the core

    @property
    def cancel_flag(self) -> threading.Event:
        return self.job.cancel

    def events(self, progress: Callable[[int, int], None] | None = None) -> Iterator[StreamEvent]:
        """The reply's events, then the end (blocks while waiting). A request that failed raises
        its error here. ``progress(done, total)`` is called, on this thread, while a long prompt
        is read. Leaving early (closing the iterator) cancels the request."""
        finished = False
        try:
            while True:
                item = self._q.get()
                if item is _END:
                    finished = True
                    return
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if isinstance(item, Progress):
                    if progress is not None:
                        progress(item.done, item.total)
                    continue
                yield item
        finally:
            if not finished:
                self.cancel()

    def cancel(self) -> None:
        """Stop the request: a queued one never starts, a running one stops within one step."""
        if not self._done.is_set():
            self.job.cancel.set()
            self.on_cancel()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the request has ended (its last event or its error is posted)."""
        return self._done.wait(timeout)

    # -- the core's side ---------------------------------------------------------------

    def put(self, item: StreamEvent | Progress) -> None:
        self._q.put(item)

    def end(self, error: BaseException | None = None) -> None:
        """The last thing posted: the end of the events, after an error if there was one."""
        if self._done.is_set():
            return
        if error is not None:
            self._q.put(error)
        self._q.put(_END)
        self._done.set()

"""The token queue between the batch's decode thread and one reader's ``stream_tokens``
(decode/batch.py): tokens in the order they were sampled, the end of the stream with why it
ended, and the reader's requests to draw a failed tool call's section again."""
from __future__ import annotations

import queue
import threading
from typing import Callable, Generator


class Feed:
    """The token queue between the decode thread and one reader's stream_tokens.

    It is also the reader's Rewind (decode/resample.py): ``rewind`` asks the decode thread to
    draw a failed tool call's section again. Every item carries the draw (epoch) it belongs
    to, so what the decode thread sampled ahead for an earlier draw is dropped unread."""

    def __init__(self, wake: Callable[[], None] = lambda: None) -> None:
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.closed = threading.Event()     # the reader stopped (stop string, max_tokens, disconnect)
        self.rewinds: queue.SimpleQueue = queue.SimpleQueue()  # (tokens kept, draw, epoch), for the decode thread
        self.epoch = 0                      # the reader's draw
        self._end: tuple[int, str | None] = (0, None)
        self._wake = wake
        self._steps: Generator[tuple[int, bool], None, None] | None = None

    @property
    def end_reason(self) -> str | None:
        """Why the decode thread ended the stream early (None: the reader ended it itself)."""
        epoch, reason = self._end
        return reason if epoch == self.epoch else None

    def steps(self) -> Generator[tuple[int, bool], None, None]:
        """The step generator (generate_step's yield shape) that blocks for each token; one per feed."""
        if self._steps is None:
            self._steps = self._read()
        return self._steps

    def _read(self) -> Generator[tuple[int, bool], None, None]:
        try:
            while True:
                epoch, item = self.q.get()
                if epoch != self.epoch:
                    continue  # sampled ahead for a draw that was given up
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item, False
        finally:
            self.closed.set()
            self._wake()

    def rewind(self, kept: int, draw: int) -> Generator[tuple[int, bool], None, None]:
        """The reader's side of a Rewind: the decode thread keeps the reply's first ``kept`` tokens and
        samples on as draw ``draw``; tokens of the draw before are dropped."""
        self.epoch += 1
        self.rewinds.put((kept, draw, self.epoch))
        self._wake()
        return self.steps()

    def put(self, epoch: int, token: int) -> None:
        self.q.put((epoch, token))

    def end(self, epoch: int, reason: str | BaseException | None) -> None:
        """No more tokens in draw ``epoch``: ``reason`` overrides the reader's finish reason
        (None: the reader ended it itself), or an error to raise there."""
        if isinstance(reason, BaseException):
            self.q.put((epoch, reason))
        else:
            self._end = (epoch, reason)
            self.q.put((epoch, None))

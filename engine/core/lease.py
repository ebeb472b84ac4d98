"""A request's hold on one sequence of the pool, as its pipeline sees it.

The pipeline runs on the core's thread and cuts its own sequence back (rejected
drafts, a tool call drawn again) or restores a snapshot into it (a checkpoint read
from disk); its view records each in the slot table (engine/kv/reuse.py), so the
table always says what every sequence holds and a later request can share it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from ..backends.base import SeqView
from ..kv.shift import moved_from

if TYPE_CHECKING:
    from ..kv.reuse import KVReuse


class TrackedView(SeqView):
    """A ``SeqView`` whose cuts and restores are recorded in the slot table."""

    __slots__ = ("reuse",)

    def __init__(self, reuse: "KVReuse", seq: int) -> None:
        super().__init__(reuse.backend, reuse.pool, seq)
        self.reuse = reuse

    def truncate(self, n: int) -> None:
        self.pool.seq_truncate(self.seq, n)
        self.reuse.table.cut(self.seq, n)

    def restore(self, state: Any) -> None:
        raise TypeError("a request's sequence restores a snapshot with hold(state, tokens)")

    def hold(self, state: Any, tokens: Sequence[int]) -> None:
        """Make the sequence hold a snapshot of exactly ``tokens``."""
        self.pool.seq_restore(self.seq, state)
        self.reuse.table.hold(self.seq, tokens)

    def move(self, moves: Sequence[tuple[int, int, int]], tokens: Sequence[int]) -> None:
        """Move chunks of the sequence's KV back into place (``SeqPool.seq_move``): it then holds ``tokens``."""
        self.pool.seq_move(self.seq, moves)
        self.reuse.table.moved(self.seq, tokens, moved_from(moves))


@dataclass(slots=True)
class SeqLease:
    """What a request's pipeline is given when it starts: its sequence, how much of its prompt the KV
    already held (``cached``), the prefix cache (for its checkpoints), when it started, and its Stop."""
    view: TrackedView
    cached: int
    reuse: "KVReuse"
    admitted: float
    queue_wait_s: float
    cancel: threading.Event  # the request's Stop

    def commit(self, history: Sequence[int]) -> None:
        """Record what the sequence holds once the request ends, whatever happened."""
        self.reuse.commit(self.view.seq, history)

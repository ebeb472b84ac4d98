"""The slot table: what each sequence of a batch context holds, and where a new prompt starts.

Every sequence keeps the KV of its last request, so a new prompt starts from the
longest prefix any sequence holds: its own sequence's (cut back), or another's,
copied. A prefix that an earlier request is still reading is waited for instead of
computed twice. The batch runner (engine/decode/batch.py) asks this table and tells
it what it computed; nothing else tracks which tokens a sequence holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from .prefix_cache import common_prefix_len

MIN_SHARE = 16  # a prefix shorter than this is recomputed rather than waited for


@dataclass(slots=True, frozen=True)
class SlotPlacement:
    """Where a prompt goes: sequence ``dst``, starting from the first ``shared`` tokens that
    sequence ``src`` holds (``src == dst``: its own KV, cut back to them)."""
    dst: int
    src: int
    shared: int


class SlotTable:
    """The tokens whose KV each of ``n_seq`` sequences holds, by position."""

    def __init__(self, n_seq: int) -> None:
        self.kv: list[list[int]] = [[] for _ in range(n_seq)]
        # Where each sequence's KV stops being what reading its tokens gives (a context shift moved it
        # there; engine/kv/shift.py); None: all of it is. Only a request that shifts is served past it.
        self.shifted: list[int | None] = [None] * n_seq

    def exact(self, seq: int) -> int:
        """How many of sequence ``seq``'s tokens hold the KV that reading them gives."""
        mark = self.shifted[seq]
        return len(self.kv[seq]) if mark is None else min(mark, len(self.kv[seq]))

    def held(self, seq: int) -> int:
        """How many tokens sequence ``seq`` holds."""
        return len(self.kv[seq])

    def place(self, free: Sequence[int], prompt: Sequence[int]) -> SlotPlacement:
        """The free sequence to serve ``prompt`` (the one holding the longest prefix of it, else
        the first), and the longest prefix any sequence holds. Never the prompt's last token:
        its logits start decoding."""
        last = len(prompt) - 1
        dst = max(free, key=lambda s: common_prefix_len(self.kv[s], prompt))
        src, best = dst, min(common_prefix_len(self.kv[dst], prompt), last)
        for s, held in enumerate(self.kv):
            n = min(common_prefix_len(held, prompt), last)
            if n > best:
                src, best = s, n
        return SlotPlacement(dst, src, best)

    def reading(self, prompt: Sequence[int], shared: int,
                others: Iterable[tuple[int, Sequence[int]]]) -> tuple[int, int] | None:
        """An earlier request still reading a longer common prefix than ``shared``: (its sequence,
        the prefix's length) to wait for, or None. ``others``: (sequence, prompt) of the requests
        in flight. A prefix must be at least MIN_SHARE tokens longer to be worth the wait."""
        for s, theirs in others:
            n = min(common_prefix_len(theirs, prompt), len(prompt) - 1)
            if n >= max(shared + MIN_SHARE, MIN_SHARE) and len(self.kv[s]) < n:
                return s, n
        return None

    def cut(self, seq: int, n: int) -> None:
        """Sequence ``seq`` now holds only its first ``n`` tokens."""
        del self.kv[seq][n:]
        mark = self.shifted[seq]
        if mark is not None and n <= mark:
            self.shifted[seq] = None

    def copy(self, src: int, dst: int, n: int) -> None:
        """Sequence ``dst`` now holds ``src``'s first ``n`` tokens (its KV was copied)."""
        self.kv[dst] = self.kv[src][:n]
        mark = self.shifted[src]
        self.shifted[dst] = mark if mark is not None and mark < n else None

    def hold(self, seq: int, tokens: Sequence[int]) -> None:
        """Sequence ``seq`` now holds exactly ``tokens``, as read (a snapshot restored)."""
        self.kv[seq] = list(tokens)
        self.shifted[seq] = None

    def moved(self, seq: int, tokens: Sequence[int], first: int | None) -> None:
        """Sequence ``seq``'s KV was moved (``first``: the first index moved) and now holds ``tokens``."""
        self.kv[seq] = list(tokens)
        mark = self.shifted[seq]
        if first is not None:
            mark = first if mark is None else min(mark, first)
        self.shifted[seq] = mark if mark is not None and mark < len(tokens) else None

    def extend(self, seq: int, tokens: Iterable[int]) -> None:
        """Sequence ``seq`` computed ``tokens`` after what it held."""
        self.kv[seq].extend(tokens)

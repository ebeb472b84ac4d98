"""Prefix cache: KV snapshots of token prefixes, reused instead of recomputed.

Keys are chained block hashes: block i's key hashes block i-1's key together
with block i's token ids, so equal keys mean equal *prefixes*, not just equal
blocks. An entry is filed under the key of the last full block it contains.
A hash match is only a hint: a hit compares the tokens themselves.

Rules the engine relies on:
- ``lookup`` never serves the last prompt token (its logits start decoding);
- only confirmed tokens are inserted (never unaccepted draft tokens): the
  caller snapshots only when the KV holds exactly ``tokens``;
- entries are evicted least-recently-used, by bytes, within ``budget_bytes``.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

DEFAULT_BLOCK = 16
DEFAULT_BUDGET = 512 * 1024 * 1024


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def block_hashes(tokens: Sequence[int] | np.ndarray, block: int) -> list[bytes]:
    """Chained hash after each full block: out[i] covers tokens[: (i+1)*block]."""
    arr = np.asarray(tokens, dtype=np.int32)
    out: list[bytes] = []
    h = b""
    for i in range(len(arr) // block):
        h = hashlib.blake2b(h + arr[i * block:(i + 1) * block].tobytes(), digest_size=16).digest()
        out.append(h)
    return out


@dataclass(slots=True)
class Entry:
    tokens: np.ndarray   # int32, the exact prefix this state holds
    state: Any           # backend snapshot
    nbytes: int
    key: bytes           # chained hash of the last full block (b"" if shorter than one block)
    pinned: bool = False  # e.g. a system-prompt preset: evicted only after unpinned entries


class PrefixCache:
    def __init__(self, budget_bytes: int = DEFAULT_BUDGET, block: int = DEFAULT_BLOCK) -> None:
        if block < 1:
            raise ValueError("block must be >= 1")
        self.block = block
        self.budget_bytes = budget_bytes
        self._entries: "OrderedDict[int, Entry]" = OrderedDict()  # id -> entry, LRU order
        self._by_key: dict[bytes, list[int]] = {}
        self._next_id = 0
        self.bytes_used = 0
        self.lookups = 0
        self.hits = 0
        self.tokens_served = 0
        self.evictions = 0
        self.inserts = 0              # new snapshots stored
        self.skipped = 0              # inserts refused because they could never fit
        self._per_token: float | None = None  # smallest snapshot bytes per token seen so far

    # -- queries ----------------------------------------------------------

    def lookup(self, prompt: Sequence[int], longer_than: int = 0) -> tuple[int, Any]:
        """Longest cached prefix of ``prompt`` that leaves at least its last token.

        Returns (n_tokens, state), or (0, None) when nothing longer than
        ``longer_than`` tokens (what the caller already has) is cached.
        """
        if self.budget_bytes <= 0:
            return 0, None
        self.lookups += 1
        n, entry = self._best(prompt)
        if entry is None or n <= longer_than:
            return 0, None
        self.hits += 1
        self.tokens_served += n
        return n, entry.state

    def _best(self, prompt: Sequence[int]) -> tuple[int, Entry | None]:
        arr = np.asarray(prompt, dtype=np.int32)
        limit = len(arr) - 1          # the last prompt token is never served
        if limit <= 0 or not self._entries:
            return 0, None
        keys = [b""] + block_hashes(arr[:limit], self.block)
        for nblocks in range(len(keys) - 1, -1, -1):
            best: Entry | None = None
            best_id = -1
            for eid in self._by_key.get(keys[nblocks], ()):
                e = self._entries[eid]
                L = len(e.tokens)
                if L <= limit and (best is None or L > len(best.tokens)) \
                        and np.array_equal(e.tokens, arr[:L]):
                    best, best_id = e, eid
            if best is not None:
                self._entries.move_to_end(best_id)
                return len(best.tokens), best
        return 0, None

    def contains(self, tokens: Sequence[int]) -> bool:
        arr = np.asarray(tokens, dtype=np.int32)
        key = self._key_for(arr)
        return any(np.array_equal(self._entries[i].tokens, arr) for i in self._by_key.get(key, ()))

    # -- updates ----------------------------------------------------------

    def insert(self, tokens: Sequence[int], snapshot: Callable[[], Any], nbytes: Callable[[Any], int],
               *, pinned: bool = False) -> bool:
        """Store a snapshot for exactly ``tokens`` (the KV must hold just these).

        ``snapshot`` is called only if the entry is new and could fit, because
        taking one copies the whole KV state: once one snapshot has been taken,
        its bytes per token predict the next one's size, and a prefix that
        could never fit the budget is refused before anything is copied.
        """
        arr = np.array(tokens, dtype=np.int32)
        if len(arr) == 0 or self.budget_bytes <= 0:
            return False
        key = self._key_for(arr)
        for eid in self._by_key.get(key, ()):
            e = self._entries[eid]
            if np.array_equal(e.tokens, arr):
                e.pinned = e.pinned or pinned
                self._entries.move_to_end(eid)
                return True
        if self._per_token is not None and self._per_token * len(arr) > self.budget_bytes:
            self.skipped += 1
            return False
        state = snapshot()
        size = nbytes(state) + arr.nbytes
        rate = size / len(arr)
        self._per_token = rate if self._per_token is None else min(self._per_token, rate)
        if size > self.budget_bytes:
            self.skipped += 1
            return False
        self._make_room(size)
        eid = self._next_id
        self._next_id += 1
        self._entries[eid] = Entry(arr, state, size, key, pinned)
        self._by_key.setdefault(key, []).append(eid)
        self.bytes_used += size
        self.inserts += 1
        return True

    def _key_for(self, arr: np.ndarray) -> bytes:
        hs = block_hashes(arr, self.block)
        return hs[-1] if hs else b""

    def _make_room(self, size: int) -> None:
        for want_pinned in (False, True):
            for eid in [i for i, e in self._entries.items() if e.pinned == want_pinned]:
                if self.bytes_used + size <= self.budget_bytes:
                    return
                self._remove(eid)
                self.evictions += 1

    def _remove(self, eid: int) -> None:
        e = self._entries.pop(eid)
        ids = self._by_key[e.key]
        ids.remove(eid)
        if not ids:
            del self._by_key[e.key]
        self.bytes_used -= e.nbytes

    def set_budget(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._make_room(0)

    def clear(self) -> None:
        self._entries.clear()
        self._by_key.clear()
        self.bytes_used = 0

    def entries(self) -> list[tuple[int, int, bool]]:
        """(n_tokens, bytes, pinned) per entry, least recently used first."""
        return [(len(e.tokens), e.nbytes, e.pinned) for e in self._entries.values()]

    def stats(self) -> dict[str, float]:
        return {
            "entries": len(self._entries),
            "bytes_used": self.bytes_used,
            "budget_bytes": self.budget_bytes,
            "lookups": self.lookups,
            "hits": self.hits,
            "hit_rate": self.hits / self.lookups if self.lookups else 0.0,
            "tokens_served": self.tokens_served,
            "evictions": self.evictions,
            "inserts": self.inserts,
            "skipped": self.skipped,
        }

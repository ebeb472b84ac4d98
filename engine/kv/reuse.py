"""KVReuse: which tokens each KV sequence holds, and how a new prompt reuses them.

Sources, cheapest first: the sequence's own KV (its last request's); another
sequence's KV, copied (a prefix several requests share: an agent's system prompt
and tools); a snapshot in the in-memory PrefixCache; a checkpoint (the system
prompt) in the on-disk PrefixStore. The engine core asks ``place`` when a request
gets a sequence, each pipeline ``reach``es its checkpoints through the core's steps,
and the core records what every step computed (``extend``) and every cut and
restore a pipeline makes (engine/core/lease.py's view). Nothing else looks at the cache's
blocks or budget, or at which tokens a sequence holds.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generator, Protocol, Sequence

from ..errors import HearthError
from ..inputs.media import portable, whole
from ..types import WANT_NONE, Compute
from .disk_store import PrefixStore
from .prefix_cache import PrefixCache, common_prefix_len
from .shift import MIN_CHUNK, moved_from, reuse_moves
from .slots import SlotTable

if TYPE_CHECKING:
    from ..backends.base import Backend, SeqPool

PREFILL_CHUNK = 256  # prompt tokens per step while a prompt is read: Stop, progress and priorities between chunks

ProgressFn = Callable[[int, int], None]


class HeldSeq(Protocol):
    """What ``reach`` needs of a request's sequence (the core's view of it)."""

    @property
    def kv_len(self) -> int: ...

    def truncate(self, n: int) -> None: ...

    def snapshot(self) -> Any: ...

    def hold(self, state: Any, tokens: Sequence[int]) -> None:
        """Make the sequence hold a snapshot of exactly ``tokens``."""


class KVReuse:
    """Owns the record of what every sequence holds, the prefix cache and the disk store."""

    def __init__(self, backend: "Backend", pool: "SeqPool", cache: PrefixCache,
                 store: PrefixStore | None = None) -> None:
        self.backend = backend
        self.pool = pool
        self.cache = cache
        self.store = store            # system-prompt snapshots on disk, across restarts
        self.table = SlotTable(pool.n_seq)
        self._live_prompt_len = [0] * pool.n_seq  # the prompt part of each sequence's last request
        self.moved = [0] * pool.n_seq  # tokens of KV the last placement moved into place (shift), per sequence
        self._identity = backend.state_identity()  # what the in-memory snapshots restore into (resized)

    @property
    def enabled(self) -> bool:
        """False when the snapshot cache is off (budget 0); a sequence's own prefix is always reused."""
        return self.cache.budget_bytes > 0

    def kv_tokens(self, seq: int = 0) -> list[int]:
        """The tokens sequence ``seq`` holds now (a copy)."""
        return list(self.table.kv[seq])

    def resizing(self) -> None:
        """The pool is about to be made again with another number of sequences: what each sequence holds
        (the window's conversation above all) goes into the memory cache first, so the next turn is
        restored, not read again, where the snapshots outlive the resize (``resized``)."""
        for seq in range(self.pool.n_seq):
            self._save(seq)

    def resized(self) -> None:
        """The pool now holds another number of sequences, all empty. Snapshots, in memory and on disk,
        follow the backend's state identity: where it did not change (a plain KV cache's states restore
        into any count: ``n_seq: any``), the in-memory ones stay; where it did (another memory's restore
        only into a context alike), they go, and the disk store keys what it saves and finds by the new
        identity (what the old one saved stays on disk for when it is back)."""
        self.table = SlotTable(self.pool.n_seq)
        self._live_prompt_len = [0] * self.pool.n_seq
        self.moved = [0] * self.pool.n_seq
        identity = self.backend.state_identity()
        if identity != self._identity:
            self.cache.clear()
            self._identity = identity
        if self.store is not None:
            self.store.rekey(identity)

    def checkpoint(self, prompt: Sequence[int], *shared: Sequence[int] | None) -> list[int]:
        """Prompt lengths worth snapshotting on the way through the prompt: for each of ``shared``
        (a system prompt and the template's user header; the same with the first message's images),
        the part of ``prompt`` it shares, if that is at least one block and leaves the last prompt
        token to compute. Shortest first."""
        if not self.enabled:
            return []
        out = set()
        for s in shared:
            n = whole(prompt, common_prefix_len(s, prompt)) if s else 0
            if self.cache.block <= n < len(prompt) - 1:
                out.add(n)
        return sorted(out)

    def choose(self, free: Sequence[int], prompt: Sequence[int]) -> int:
        """The free sequence for ``prompt``: the one holding the longest prefix of it (the first on
        a tie, so requests pack into the lowest sequences: a step batches consecutive ones best)."""
        return self.table.place(free, prompt).dst

    def place(self, seq: int, prompt: list[int], *, shift: bool = False) -> int:
        """Bring sequence ``seq`` to the longest reusable prefix of ``prompt`` (never its last token:
        its logits start decoding), from its own KV, another sequence's, or the prefix cache.
        Returns how many prompt tokens it holds. Its KV holds exactly those afterwards.
        ``shift`` (the request's context policy is "shift"): a prompt that left out part of what the
        sequence held (its oldest turns) may have the rest moved into place (engine/kv/shift.py), and
        KV moved so before serves it; any other request is served only KV as reading gives it."""
        held = self.table.kv[seq]
        keep = min(common_prefix_len(held, prompt), len(prompt) - 1)
        self.moved[seq] = 0
        if not shift:
            keep = min(keep, self.table.exact(seq))
        if keep < self._live_prompt_len[seq] - 1:
            # Diverging inside the last *prompt* means another conversation (or an edit), not a
            # regenerate: keep this sequence's state in the cache for a switch back.
            self._save(seq)
        if shift:
            moved = self._shift_into_place(seq, prompt, keep)
            if moved is not None:
                return moved
        spot = self.table.place([seq], prompt)
        shared = spot.shared if shift else min(spot.shared, self.table.exact(spot.src))
        if spot.src != seq and shared > keep:
            self.pool.seq_copy(spot.src, seq, shared)
            self.table.copy(spot.src, seq, shared)
            keep = shared
        n_cached, state = self.cache.lookup(prompt, longer_than=keep)
        if state is not None:
            self.pool.seq_restore(seq, state)
            self.table.hold(seq, prompt[:n_cached])
            keep = n_cached
        keep = whole(prompt, keep)  # an image is read whole or not at all
        self.pool.seq_truncate(seq, keep)
        self.table.cut(seq, keep)
        self._live_prompt_len[seq] = len(prompt)
        return keep

    def _shift_into_place(self, seq: int, prompt: list[int], keep: int) -> int | None:
        """Move the chunks of ``prompt`` that sequence ``seq`` holds further on into place (llama-server's
        cache reuse); how many prompt tokens it then holds, or None where moving gains nothing."""
        if not self.pool.can_shift(seq):
            return None
        moves, n = reuse_moves(self.table.kv[seq], prompt, keep)
        if not moves or n < keep + MIN_CHUNK or self.table.place([seq], prompt).shared >= n:
            return None
        self.pool.seq_move(seq, moves)
        self.table.moved(seq, prompt[:n], moved_from(moves))
        self.moved[seq] = sum(m[2] for m in moves if m[0] != m[1])
        self._live_prompt_len[seq] = len(prompt)
        return n

    def resume(self, seq: int, tokens: list[int]) -> int:
        """Bring sequence ``seq`` to the longest prefix of ``tokens`` it can get without computing (its own
        KV, another sequence's, a snapshot), all of them included: a preempted request's, which its
        pipeline continues from. Returns how many it holds."""
        return self.place(seq, [*tokens, self.backend.n_vocab])  # an id no sequence holds: every token may be served

    def save(self, seq: int) -> None:
        """Keep what sequence ``seq`` holds in the prefix cache (unpinned) before it is given away."""
        self._save(seq)

    def reach(self, view: HeldSeq, tokens: list[int]) -> Generator[Compute, Any, bool]:
        """Bring the sequence to exactly ``tokens`` (a checkpoint: it holds a prefix of them now), from
        disk if stored, else through the core's steps; then keep it in memory (pinned) and on disk.
        Returns whether it came from disk."""
        store = self.store
        # Image positions name this process's slots: on disk they are renumbered and named.
        key, images = portable(tokens, self.backend.media_name)
        stored = store.load(key, images) if store is not None and view.kv_len < len(tokens) else None
        if stored is not None:
            try:
                state = self.backend.state_from_bytes(len(tokens), stored)
                view.hold(state, tokens)
            except HearthError as e:  # passed its checksum but the backend refused it
                store.reject(key, str(e), images)  # type: ignore[union-attr]
                view.truncate(0)
                stored = None
        if stored is None:
            if view.kv_len < len(tokens):
                yield Compute(tokens[view.kv_len:], WANT_NONE, prompt=True)
            state = view.snapshot()
        self.cache.insert(tokens, lambda: state, self.backend.nbytes, pinned=True)
        if store is not None and stored is None:
            store.save(key, self.backend.state_bytes(state), images)
        return stored is not None

    def _save(self, seq: int) -> None:
        """Snapshot a sequence's KV before a different prompt overwrites it, so switching back to
        that conversation costs a restore, not a prefill."""
        held = self.table.kv[seq]
        if self.enabled and len(held) >= self.cache.block and self.table.shifted[seq] is None:
            self.cache.insert(held, lambda: self.pool.seq_snapshot(seq), self.backend.nbytes)

    def extend(self, seq: int, tokens: Sequence[int]) -> None:
        """A step computed ``tokens`` after what sequence ``seq`` held."""
        self.table.extend(seq, tokens)

    def commit(self, seq: int, history: Sequence[int]) -> None:
        """Record what sequence ``seq`` really holds after a request (stopped, failed or finished):
        ``history`` is every token fed or produced, in order."""
        n = self.pool.seq_len(seq)
        self.table.kv[seq] = list(history[:n])
        self.table.cut(seq, n)  # a shift's mark past what it holds now goes

    def reset(self) -> None:
        """Forget what every sequence holds (the cached snapshots stay)."""
        for seq in range(self.pool.n_seq):
            self.pool.seq_truncate(seq, 0)
            self.table.cut(seq, 0)
            self._live_prompt_len[seq] = 0

    def stats(self) -> dict[str, float]:
        """Hit rate and bytes of the prefix cache."""
        return self.cache.stats()

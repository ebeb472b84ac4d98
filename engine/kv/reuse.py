"""KVReuse: which tokens the backend's KV holds, and how a new prompt reuses them.

Three sources, cheapest first: the live KV's common prefix with the new
prompt; a snapshot in the in-memory PrefixCache; a system-prompt snapshot in
the on-disk PrefixStore. The engine asks ``prepare(prompt)`` before a request
and calls ``commit(history)`` after it, whatever happened; nothing else
outside this module looks at the cache's blocks or budget.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import Cancelled, HearthError
from ..inputs.media import portable, run_end, whole
from .disk_store import PrefixStore
from .prefix_cache import PrefixCache, common_prefix_len

if TYPE_CHECKING:
    from ..backends.base import Backend

PREFILL_CHUNK = 256  # tokens per forward() while prefilling: cancel and progress between chunks
# The prompt's last few tokens are fed by the first decode step in one forward,
# without the abort check: a short follow-up turn then costs one llama_decode,
# not two, and Stop still lands within this many tokens' compute (~0.25 s here).
FINAL_PIECE = 32

ProgressFn = Callable[[int, int], None]


PrefillCancelled = Cancelled  # Stop while the prompt was read: the KV holds whole chunks only


def prefill(backend: Backend, tokens: Sequence[int], *, cancel: threading.Event | None = None,
            progress: ProgressFn | None = None, done: int = 0, total: int | None = None,
            chunk: int = PREFILL_CHUNK) -> None:
    """Append ``tokens`` to the KV in chunks, checking ``cancel`` between them.

    Chunking does not change a single logit (tests check that batched and
    single-step logits are bit-identical), so a long prompt can be stopped
    and its progress shown at no cost in exactness. ``progress(done, total)``
    counts prompt tokens, ``done`` of them already in the KV before this call.
    """
    total = done + len(tokens) if total is None else total
    if not tokens:
        return
    backend.set_abort(cancel)
    try:
        i = 0
        while i < len(tokens):
            if cancel is not None and cancel.is_set():
                raise PrefillCancelled()
            end = whole(tokens, i + chunk)  # a chunk never ends inside an image
            end = end if end > i else run_end(tokens, i)  # an image longer than a chunk: all of it
            backend.forward(tokens[i:end])
            i = end
            if progress is not None:
                progress(done + min(i, len(tokens)), total)
    finally:
        backend.set_abort(None)


class KVReuse:
    """Owns the record of what the KV holds, the prefix cache and the disk store."""

    def __init__(self, backend: Backend, cache: PrefixCache, store: PrefixStore | None = None) -> None:
        self.backend = backend
        self.cache = cache
        self.store = store            # system-prompt snapshots on disk, across restarts
        self._kv_tokens: list[int] = []   # exactly the tokens the backend's KV holds
        self._live_prompt_len = 0         # prompt part of _kv_tokens' last request

    @property
    def enabled(self) -> bool:
        """False when the snapshot cache is off (budget 0); the live prefix is always reused."""
        return self.cache.budget_bytes > 0

    @property
    def kv_tokens(self) -> list[int]:
        """The tokens the backend's KV holds now (a copy)."""
        return list(self._kv_tokens)

    def checkpoint(self, prompt: Sequence[int], *shared: Sequence[int] | None) -> list[int]:
        """Prompt lengths worth snapshotting on the way through prefill: for each of
        ``shared`` (a system prompt and the template's user header; the same with the
        first message's images), the part of ``prompt`` it shares, if that is at least
        one block and leaves the last prompt token to compute. Shortest first."""
        if not self.enabled:
            return []
        out = set()
        for s in shared:
            n = whole(prompt, common_prefix_len(s, prompt)) if s else 0
            if self.cache.block <= n < len(prompt) - 1:
                out.add(n)
        return sorted(out)

    def prepare(self, prompt: list[int], checkpoints: Sequence[int] = (), *,
                cancel: threading.Event | None = None, progress: ProgressFn | None = None) -> int:
        """Bring the KV to the longest reusable prefix of ``prompt`` (never the
        last token: its logits start decoding), passing through ``checkpoints``.

        Returns how many prompt tokens were served without computing them.
        Raises PrefillCancelled if ``cancel`` is set while prefilling a checkpoint.
        Afterwards (or after any error) the KV holds ``prompt[:kv_len]``; the
        caller records that with ``commit``.
        """
        b = self.backend
        keep = min(common_prefix_len(self._kv_tokens, prompt), len(prompt) - 1)
        if keep < self._live_prompt_len - 1:
            # Diverging inside the last *prompt* means another conversation (or an
            # edit), not a regenerate: keep the live state for a switch back.
            self._save_live()
        n_cached, state = self.cache.lookup(prompt, longer_than=keep)
        if state is not None:
            b.restore(state)
            keep = n_cached
        keep = whole(prompt, keep)  # an image is read whole or not at all
        b.truncate(keep)
        # Prefill up to each checkpoint and snapshot it, so the shared system
        # prompt lands in the cache even on this first, cold request.
        for cp in checkpoints:
            if cp > b.kv_len:
                keep = self._reach(prompt[:cp], keep, cancel, progress, len(prompt))
        self._live_prompt_len = len(prompt)
        return keep

    def _reach(self, tokens: list[int], served: int, cancel: threading.Event | None,
               progress: ProgressFn | None, total: int) -> int:
        """Bring the KV to exactly ``tokens``: from disk if stored, else by
        prefilling; then cache it in memory (pinned) and on disk."""
        b = self.backend
        store = self.store
        # Image positions name this process's slots: on disk they are renumbered and named.
        key, images = portable(tokens, b.media_name)  # text alone: the tokens themselves, no names
        stored = store.load(key, images) if store is not None else None
        if stored is not None:
            try:
                state = b.state_from_bytes(len(tokens), stored)
                b.restore(state)  # the KV now equals this state: it is what the memory cache keeps too
                served = len(tokens)
            except HearthError as e:  # passed its checksum but the backend refused it
                store.reject(key, str(e), images)  # type: ignore[union-attr]
                b.truncate(0)
                stored, served = None, 0
        if stored is None:
            prefill(b, tokens[b.kv_len:], cancel=cancel, progress=progress, done=b.kv_len, total=total)
            state = b.snapshot()
        self.cache.insert(tokens, lambda: state, b.nbytes, pinned=True)
        if store is not None and stored is None:
            store.save(key, b.state_bytes(state), images)
        return served

    def _save_live(self) -> None:
        """Snapshot the live KV before a different prompt overwrites it, so
        switching back to that conversation costs a restore, not a prefill."""
        if self.enabled and len(self._kv_tokens) >= self.cache.block:
            self.cache.insert(self._kv_tokens, self.backend.snapshot, self.backend.nbytes)

    def commit(self, history: Sequence[int]) -> None:
        """Record what the KV really holds after a request (stopped, failed or
        finished): ``history`` is every token fed or produced, in order."""
        self._kv_tokens = list(history[:self.backend.kv_len])

    def reset(self) -> None:
        """Forget the live KV (the cached snapshots stay)."""
        self.backend.truncate(0)
        self._kv_tokens = []
        self._live_prompt_len = 0

    def stats(self) -> dict[str, float]:
        """Hit rate and bytes of the prefix cache."""
        return self.cache.stats()

"""Where drafts come from: a small model with the target's tokenizer, or the
history itself (n-gram lookup); and whether a model may draft for another."""
from __future__ import annotations

import time
from typing import Callable, Protocol, Sequence

import numpy as np

from ..backends.base import Backend, SeqView
from ..kv.prefix_cache import common_prefix_len


class DraftSource(Protocol):
    """What ``speculative_step`` asks of a draft."""

    kind: str
    # Seconds the last ``propose`` spent catching up on tokens it had not seen
    # (a new prompt, tokens decoded in another mode). The user waits for it, so
    # the mode's rate pays for it; the per-k cost fit does not, it is a one-off.
    catchup_s: float

    def propose(self, history: Sequence[int], k: int, pick: Callable) -> tuple[list[int], list]:
        """Up to k tokens continuing ``history``, with their distributions (or None)."""


class ModelDraft:
    """A small model with the same tokenizer; keeps its own KV between rounds.

    ``n_vocab_target`` is the target's logits width: the draft never proposes
    an id past it, and its distributions are vectors of that width. Real pairs
    differ in width (HF Qwen2.5 0.5B has 151,936 logits, the 7B 152,064): a
    wider draft is cut, a narrower one's distribution gets zeros for the ids
    it lacks, so the accept rule compares vectors of one width.
    """

    kind = "model"

    def __init__(self, backend: Backend, *, n_vocab_target: int, seq: int = 0) -> None:
        self.backend = backend
        self.n_vocab_target = n_vocab_target
        # The draft keeps one sequence per sequence of the target: the target's sequence ``seq``
        # drafts on the draft's, whose KV follows that conversation from round to round.
        self.seq = SeqView(backend, backend.pool(), seq)
        self._kv: list[int] = []
        self.catchup_s = 0.0

    def for_seq(self, seq: int) -> "ModelDraft":
        """The same draft model on another of its sequences."""
        return ModelDraft(self.backend, n_vocab_target=self.n_vocab_target, seq=seq)

    def propose(self, history: Sequence[int], k: int, pick: Callable) -> tuple[list[int], list]:
        """Up to ``k`` tokens from the draft model, each picked by ``pick(context, logits)``."""
        b = self.seq
        self.catchup_s = 0.0
        k = min(k, b.n_ctx - len(history))
        if k <= 0:
            return [], []
        # Reuse the draft's KV up to where it and the history diverge; the
        # newest token is always fed again, its logits start the proposal.
        common = min(common_prefix_len(self._kv, history), len(history) - 1)
        if max(history[common:]) >= self.backend.n_vocab:
            # The target produced an id past the draft's vocabulary (one of its
            # padding rows): the draft cannot read it, so this round goes plain.
            return [], []
        b.truncate(common)
        t0 = time.perf_counter()
        logits = b.forward(history[common:])
        # Feeding more than the newest token is a one-off catch-up (a new prompt,
        # or tokens decoded while another mode ran), not the steady-state cost.
        self.catchup_s = time.perf_counter() - t0 if len(history) - common > 1 else 0.0
        drafts: list[int] = []
        dists: list = []
        ctx = list(history)
        for i in range(k):
            if logits.shape[-1] > self.n_vocab_target:
                logits = logits[: self.n_vocab_target]
            tok, dist = pick(ctx, logits)
            if dist is not None and dist.shape[0] < self.n_vocab_target:
                dist = np.pad(dist, (0, self.n_vocab_target - dist.shape[0]))
            drafts.append(tok)
            dists.append(dist)
            ctx.append(tok)
            if i < k - 1:
                logits = b.forward((tok,))
        self._kv = list(history) + drafts[:-1]
        return drafts, dists

    def reset(self) -> None:
        self._kv = []


class NgramDraft:
    """Copies the continuation of the longest earlier match of the history's
    suffix (prompt lookup decoding). Free to draft; strong when the answer
    repeats its input: editing code, rewriting, quoting.

    Suffixes of ``SIZES`` tokens (up to ``max_n``) are indexed; the longest one
    that occurred before wins, and its latest occurrence. A short match is
    often a coincidence (``    return`` occurs all over a file); a 16- or
    32-token match is the place in the input the reply is copying, so the
    longest match finds where a rewrite really is, and ``matched`` (its length)
    tells the controller how far to trust it.
    """

    kind = "ngram"
    catchup_s = 0.0  # seconds the last propose spent indexing a new reply's history (a one-off)
    matched = 0  # the length of the n-gram the last proposal continues (0: none)
    SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32)

    def __init__(self, max_n: int = 32, min_n: int = 2) -> None:
        self.sizes = tuple(n for n in self.SIZES if min_n <= n <= max_n) or (min_n,)
        # per size: n-gram -> end position of its latest occurrence
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.sizes}
        self._upto = 0
        self._seen: list[int] = []

    def _catch_up(self, history: Sequence[int], end: int) -> None:
        # History only grows within a request; if it was rewritten, rebuild.
        if self._upto > len(history) or self._seen[-64:] != list(history[max(0, self._upto - 64):self._upto]):
            for index in self._index.values():
                index.clear()
            self._upto, self._seen = 0, []
        for j in range(self._upto, end):
            for n in self.sizes:
                if j - n + 1 < 0:
                    break
                self._index[n][tuple(history[j - n + 1:j + 1])] = j
        self._upto = max(self._upto, end)
        self._seen = list(history[max(0, self._upto - 64):self._upto])

    def propose(self, history: Sequence[int], k: int, pick: Callable) -> tuple[list[int], list]:
        # Index n-grams ending before the last position, so a hit is an earlier occurrence.
        t0, fresh = time.perf_counter(), len(history) - 1 - self._upto > 2
        self._catch_up(history, len(history) - 1)
        self.catchup_s = time.perf_counter() - t0 if fresh else 0.0
        self.matched = 0
        for n in reversed(self.sizes):
            if len(history) < n:
                continue
            pos = self._index[n].get(tuple(history[-n:]))
            if pos is not None:
                cont = list(history[pos + 1:pos + 1 + k])
                # An image's positions (ids below zero) are not tokens the model can write.
                cont = cont[:next((i for i, t in enumerate(cont) if t < 0), len(cont))]
                if cont:
                    self.matched = n
                    return cont, [None] * len(cont)
        return [], []

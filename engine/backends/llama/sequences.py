"""The KV sequences of one llama.cpp context, and the batch that steps them together.

A context holds ``n_seq`` sequences. With more than one, each has a KV stream of
its own (``kv_unified`` off): a sequence's cells never interleave with another's,
so its logits are bit-identical whatever else runs in the same batch (a unified
cache sums attention over interleaved cells in another order: measured on the
bundled model, up to 0.95 logit off its solo run). Each stream holds the full
per-sequence context; llama.cpp's n_ctx is that times ``n_seq``.

``decode`` is the engine core's one call per step: every row (a sequence's next
token, a speculative round's drafts to verify, a prompt chunk) goes into one
``llama_batch``, ordered by sequence, since llama.cpp splits a multi-stream batch
into passes of consecutive sequences with as many tokens each. A row holding an
image's positions is read on its own first (its rows are embeddings, not tokens).
"""
from __future__ import annotations

from typing import Sequence

import llama_cpp as lc
import numpy as np

from ...errors import Cancelled, ContextFullError, HearthError
from ...types import WANT_ALL, WANT_LAST
from ..base import Row
from . import state
from .log import _log_mark, decode_error
from .image_decode import decode_rows


class SeqPositions:
    """How many tokens each sequence holds, and where its next token sits.

    M-RoPE images (Qwen2-VL and later) take fewer positions than tokens: after one, every token sits
    at its index less a lag. ``shifts[seq]`` lists (index after the image, lag from there)."""

    def __init__(self, n_seq: int) -> None:
        self.past = [0] * n_seq
        self.shifts: list[list[tuple[int, int]]] = [[] for _ in range(n_seq)]

    def pos(self, seq: int, n: int) -> int:
        """The position of sequence ``seq``'s token at index ``n``."""
        lag = 0
        for i, d in self.shifts[seq]:
            if i <= n:
                lag = d
        return n - lag

    def cut(self, seq: int, n: int) -> None:
        self.past[seq] = n
        self.shifts[seq] = [(i, d) for i, d in self.shifts[seq] if i <= n]


def fill_batch(batch: object, items: Sequence[tuple[int, int, int, bool]]) -> None:
    """``items``: (sequence, token, position, want logits), in batch order."""
    for i, (seq, tok, pos, want) in enumerate(items):
        batch.token[i] = tok  # type: ignore[attr-defined]
        batch.pos[i] = pos  # type: ignore[attr-defined]
        batch.n_seq_id[i] = 1  # type: ignore[attr-defined]
        batch.seq_id[i][0] = seq  # type: ignore[attr-defined]
        batch.logits[i] = want  # type: ignore[attr-defined]
    batch.n_tokens = len(items)  # type: ignore[attr-defined]


class Streams:
    """A context's sequences: text rows of several through ``llama_decode`` (``n_batch`` tokens a
    call), an image's rows into one, and each sequence cut back, copied, snapshotted and restored."""

    def __init__(self, ctx: object, mem: object, batch: object, n_batch: int, n_vocab: int, n_ctx: int,
                 at: SeqPositions, *, n_stream: int | None = None) -> None:
        self.ctx, self.mem, self.batch, self.n_batch, self.n_vocab, self.at = ctx, mem, batch, n_batch, n_vocab, at
        self.n_ctx = n_ctx
        self.n_stream = n_stream  # the KV streams a restored state is laid out for (None: restored as taken)

    def truncate(self, seq: int, n: int) -> None:
        at = self.at
        if n >= at.past[seq]:
            return
        n = max(0, n)
        if not lc.llama_memory_seq_rm(self.mem, seq, at.pos(seq, n), -1):
            raise HearthError("this model's memory cannot be partially rolled back")
        at.cut(seq, n)

    def copy(self, src: int, dst: int, n: int) -> None:
        """``dst`` holds ``src``'s first ``n`` tokens: between two streams llama.cpp copies a whole
        stream (a memory copy, no compute), then the copy is cut back."""
        at = self.at
        lc.llama_memory_seq_rm(self.mem, dst, -1, -1)
        lc.llama_memory_seq_cp(self.mem, src, dst, -1, -1)
        at.past[dst], at.shifts[dst] = at.past[src], list(at.shifts[src])
        self.truncate(dst, n)

    def can_shift(self, seq: int) -> bool:
        """Whether sequence ``seq``'s KV can be moved to other positions: the model's memory shifts
        (RoPE models do), and no M-RoPE image lags its positions behind its tokens (llama.cpp's
        server refuses to shift multimodal sequences for the same reason)."""
        return not self.at.shifts[seq] and bool(lc.llama_memory_can_shift(self.mem))

    def move(self, seq: int, moves: Sequence[tuple[int, int, int]]) -> None:
        """Chunks of sequence ``seq``'s KV moved back into place: each ``(src, dst, n)`` takes the
        ``n`` tokens at index ``src`` to ``dst`` (in order, ``dst`` right after the last chunk, never
        after ``src``); what lies between is removed, and so is everything after the last chunk.
        llama.cpp's own two calls (its server's context shift and cache reuse): ``seq_rm`` of the
        gap, ``seq_add`` of the chunk's positions, the keys' RoPE rotated at the next decode."""
        if not self.can_shift(seq):
            raise HearthError("this sequence's KV cannot be shifted")
        at = self.at
        end, cur = at.past[seq], -1
        for src, dst, n in moves:
            if (cur >= 0 and dst != cur) or not 0 <= dst <= src or n < 0 or src + n > end:
                raise HearthError(f"a KV move out of place ({src} -> {dst}, {n} tokens of {end})")
            if src > dst:
                lc.llama_memory_seq_rm(self.mem, seq, dst, src)
                lc.llama_memory_seq_add(self.mem, seq, src, src + n, dst - src)
            cur = dst + n
        if cur >= 0:
            lc.llama_memory_seq_rm(self.mem, seq, cur, -1)
            at.past[seq] = cur

    def snapshot(self, seq: int) -> tuple:
        return state.take(self.ctx, self.at.past[seq], tuple(self.at.shifts[seq]), seq)

    def restore(self, seq: int, snap: tuple) -> None:
        lc.llama_memory_seq_rm(self.mem, seq, -1, -1)
        self.at.cut(seq, 0)
        if snap[0] == 0:
            return
        state.put(self.ctx, snap[1], seq, self.n_stream)
        self.at.past[seq] = snap[0]
        self.at.shifts[seq] = list(snap[2]) if len(snap) > 2 else []

    def embd(self, rows: np.ndarray, all_logits: bool, non_causal: bool,
             mrope: tuple[np.ndarray, np.ndarray, int] | None, seq: int) -> np.ndarray:
        """An image's encoded rows into sequence ``seq`` in one batch (LlamaCppBackend.forward_embd)."""
        at = self.at
        if at.past[seq] + len(rows) > self.n_ctx:
            raise ContextFullError(f"context is full ({at.past[seq]} + {len(rows)} > {self.n_ctx} tokens)")
        pos0 = at.pos(seq, at.past[seq])
        try:
            out = decode_rows(self.ctx, rows, pos0, self.n_vocab, all_logits, non_causal,
                              None if mrope is None else mrope[0] + pos0 * mrope[1], seq)
        except BaseException:
            lc.llama_memory_seq_rm(self.mem, seq, pos0, -1)  # whatever part of the batch landed
            raise
        at.past[seq] += len(rows)
        if mrope is not None and mrope[2] != len(rows):
            at.shifts[seq].append((at.past[seq], at.past[seq] - (pos0 + mrope[2])))
        return out

    def run(self, rows: Sequence[Row]) -> list[np.ndarray | None]:
        """Every row's tokens appended to its sequence; per row its logits as ``Row`` asks."""
        order = sorted(range(len(rows)), key=lambda r: rows[r][0])
        items: list[tuple[int, int, int, bool]] = []
        owner: list[tuple[int, int]] = []  # per item: (row, index within the row)
        starts: dict[int, int] = {}
        for r in order:
            seq, tokens, want = rows[r]
            if seq in starts:
                raise HearthError(f"sequence {seq} appears twice in one step")
            n0 = self.at.past[seq]
            starts[seq] = n0
            for i, t in enumerate(tokens):
                last = i == len(tokens) - 1
                items.append((seq, int(t), self.at.pos(seq, n0 + i), want == WANT_ALL or (want == WANT_LAST and last)))
                owner.append((r, i))
        out: list[np.ndarray | None] = [None] * len(rows)
        whole: dict[int, list[np.ndarray]] = {}
        calls = range(0, len(items), self.n_batch)
        try:
            for start in calls:
                part = items[start:start + self.n_batch]
                self._decode(part)
                for j, item in enumerate(part):
                    if not item[3]:
                        continue
                    r, _i = owner[start + j]
                    logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ctx, j), shape=(self.n_vocab,))
                    if rows[r][2] == WANT_ALL:
                        whole.setdefault(r, []).append(logits.copy())
                    else:  # one call only: a view, valid until the next decode; else a copy
                        out[r] = logits if len(calls) == 1 else logits.copy()
        except BaseException:
            for seq, n0 in starts.items():
                lc.llama_memory_seq_rm(self.mem, seq, self.at.pos(seq, n0), -1)
            raise
        for r, got in whole.items():
            out[r] = np.stack(got)
        for seq, tokens, _want in rows:
            self.at.past[seq] += len(tokens)
        return out

    def _decode(self, items: Sequence[tuple[int, int, int, bool]]) -> None:
        fill_batch(self.batch, items)
        mark = _log_mark()
        rc = lc.llama_decode(self.ctx, self.batch)
        if rc == 0:
            return
        if rc == 1:
            raise ContextFullError("no room left in the KV cache for this batch")
        if rc == 2:
            raise Cancelled("stopped while reading the prompt")
        raise decode_error(rc, len(items), mark)


def check_room(at: SeqPositions, n_ctx: int, rows: Sequence[Row]) -> None:
    """Every row fits its sequence's context (ContextFullError names the first that does not)."""
    for seq, tokens, _want in rows:
        if not tokens:
            raise ValueError("a row needs at least one token")
        if at.past[seq] + len(tokens) > n_ctx:
            raise ContextFullError(f"context is full ({at.past[seq]} + {len(tokens)} > {n_ctx} tokens)")

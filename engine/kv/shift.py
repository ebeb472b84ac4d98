"""Where a sequence's KV can be moved instead of read again: llama.cpp's two ways, as plans.

- **Cache reuse** (llama-server's ``--cache-reuse N``): a new prompt that leaves out part of
  what the sequence held (the oldest turns of a conversation) finds the rest again, chunk by
  chunk, and each chunk of at least ``MIN_CHUNK`` tokens is moved to its new place.
- **Context shift** (``--context-shift``): a reply that fills the context keeps the first
  ``n_keep`` tokens, discards half of the rest and moves the other half back.

A plan is a list of moves ``(src, dst, n)`` for ``SeqPool.seq_move``. Moving keys is not the
same as computing them at their new place (each moved token attended to what was removed), so
only a request whose context policy is ``shift`` is ever served from moved KV.
"""
from __future__ import annotations

from typing import Sequence

from ..inputs.media import whole

Move = tuple[int, int, int]  # (from index, to index, tokens)

MIN_CHUNK = 16  # a chunk found again shorter than this is read again (llama-server's --cache-reuse)


def reuse_moves(held: Sequence[int], prompt: Sequence[int], start: int,
                min_chunk: int = MIN_CHUNK) -> tuple[list[Move], int]:
    """llama-server's cache reuse: past the common prefix ``start``, the chunks of ``held`` found again,
    in order, in ``prompt`` (never its last token: its logits start the reply), each moved to where the
    prompt has it. Returns the moves and how many prompt tokens the sequence holds after them. A chunk
    never starts or ends inside an image (a projector's chunk is read whole)."""
    head_c = head_p = start
    limit = len(prompt) - 1
    moves: list[Move] = []
    while head_c < len(held) and head_p < limit:
        n = 0
        while head_c + n < len(held) and head_p + n < limit and held[head_c + n] == prompt[head_p + n]:
            n += 1
        if n and whole(prompt, head_p) == head_p:
            n = whole(prompt, head_p + n) - head_p
        else:
            n = 0
        if n >= min_chunk:
            moves.append((head_c, head_p, n))
            head_c += n
            head_p += n
        else:
            head_c += 1
    return moves, head_p


def context_shift(n_past: int, n_keep: int, n_ctx: int) -> Move | None:
    """llama-server's context shift of a full sequence of ``n_past`` tokens: keep the first ``n_keep``
    (at most ``n_ctx - 4``), discard half of the rest and move the other half back. None when
    nothing can be discarded."""
    n_keep = min(n_ctx - 4, n_keep)
    n_left = n_past - n_keep
    n_discard = n_left // 2
    if n_keep < 0 or n_discard <= 0:
        return None
    return n_keep + n_discard, n_keep, n_left - n_discard


def moved_from(moves: Sequence[Move]) -> int | None:
    """The first index whose KV a plan really moves (None: every chunk stays where it was)."""
    return min((dst for src, dst, _n in moves if src != dst), default=None)

"""How an image sits in a token list: one negative id per position it takes.

The KV record, the prefix cache and the prompt builder all work on token
lists. An image's positions are written into them as ids below zero that name
the image's encoded chunk (a *slot*, one per image hash and tile, given out by
the projector that encoded it) and the row inside it. Two prompts then share a
prefix through an image exactly when they hold the same image (its SHA-256)
at the same place, and no text token can ever equal an image position.

Slots are per process. For the on-disk prefix store a token list is made
portable first: its slots renumbered in order of appearance, beside the names of
the images they hold (``portable``), which another process compares in full.
"""
from __future__ import annotations

from typing import Callable, Sequence

SPAN = 1 << 16             # most positions one encoded chunk takes
MAX_SLOTS = (1 << 15) - 1  # keeps every id within int32


def media_token(slot: int, row: int) -> int:
    return -(1 + slot * SPAN + row)


def slot_row(token: int) -> tuple[int, int]:
    """(slot, row) of an image position (``token < 0``)."""
    return divmod(-token - 1, SPAN)


def has_media(tokens: Sequence[int]) -> bool:
    return any(t < 0 for t in tokens)


def whole(tokens: Sequence[int], cut: int) -> int:
    """``cut``, moved back to the start of the image it would split (a projector's chunk is
    decoded in one batch: some models attend across all its positions at once)."""
    if 0 < cut < len(tokens) and tokens[cut] < 0 and tokens[cut - 1] < 0:
        slot, row = slot_row(tokens[cut])
        if row and slot_row(tokens[cut - 1])[0] == slot:
            return cut - row
    return cut


def text_prefix(tokens: Sequence[int]) -> int:
    """How many leading tokens are text (the part of a list before its first image)."""
    for i, t in enumerate(tokens):
        if t < 0:
            return i
    return len(tokens)


def run_end(tokens: Sequence[int], i: int) -> int:
    """Where the image that starts at ``i`` ends (``i`` itself for a text token)."""
    if i >= len(tokens) or tokens[i] >= 0:
        return i
    slot = slot_row(tokens[i])[0]
    j = i
    while j < len(tokens) and tokens[j] < 0 and slot_row(tokens[j]) == (slot, j - i + slot_row(tokens[i])[1]):
        j += 1
    return j


def portable(tokens: Sequence[int], name_of: Callable[[int], str]) -> tuple[list[int], list[str]]:
    """``tokens`` with each image's slot renumbered by its first appearance (0, 1, ...), and the
    names of those images (``name_of(slot)``: the SHA-256 and appearance, Backend.media_name).
    The same prompt in another process gives the same pair; text tokens are unchanged."""
    order: dict[int, int] = {}
    out: list[int] = []
    for t in tokens:
        if t >= 0:
            out.append(t)
            continue
        slot, row = slot_row(t)
        out.append(media_token(order.setdefault(slot, len(order)), row))
    return out, [name_of(slot) for slot in order]

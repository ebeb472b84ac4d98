"""A llama.cpp sequence's KV snapshot, in memory and as bytes for the disk store.

A snapshot is (tokens in the KV, llama.cpp's sequence state, the M-RoPE shifts).
The shifts matter for models that place an image on a 2-D grid (Qwen2-VL and
later): the image takes fewer positions than tokens, so every token after it sits
at its index less a lag. The KV bytes hold those positions already; the shifts let
the backend place the next token, roll back, and restore a snapshot exactly. They
travel in the bytes too, so a prefix with such an image read back after a restart
continues at the right position.
"""
from __future__ import annotations

import ctypes
import struct

import llama_cpp as lc

from ...errors import HearthError

# The bytes' layout: a count, then (token index, lag) pairs, then llama.cpp's state.
FORMAT = "shifts1"
_COUNT = struct.Struct("<I")
_HEAD = struct.Struct("<IiI")  # llama.cpp's sequence state: io magic, sequence id, KV stream count
IO_MAGIC = 0xAF143CD8
MAX_STREAMS = 256
_PAIR = struct.Struct("<qq")

Shifts = tuple[tuple[int, int], ...]
State = tuple[int, bytearray, Shifts]


def take(ctx: object, n_past: int, shifts: Shifts, seq: int = 0) -> State:
    """Sequence ``seq``'s state as it is now."""
    size = lc.llama_state_seq_get_size(ctx, seq)
    data = bytearray(size)
    written = lc.llama_state_seq_get_data(ctx, (ctypes.c_uint8 * size).from_buffer(data), size, seq)
    if written != size:
        del data[written:]
    return (n_past, data, shifts)


def restreamable(model: object) -> bool:
    """Whether ``model``'s sequence states restore into a context of any stream count (``restream``):
    its memory is one plain KV cache, with no recurrent state and no sliding-window cache beside it."""
    return not (lc.llama_model_is_recurrent(model) or lc.llama_model_is_hybrid(model)
                or lc.llama_model_n_swa(model) > 0)


def restream(data: bytearray, n_stream: int) -> bytearray:
    """A one-sequence state of a plain KV cache, laid out for a context of ``n_stream`` KV streams.

    llama.cpp writes such a state as its io magic, the sequence's id, the context's stream count,
    then per stream a cell count and, for the one stream that holds the sequence, its cells; and it
    restores only into a context with as many streams, though the cells land in the sequence's own
    stream whatever their place. A context of one sequence has one stream and a context of N has N,
    so without this a snapshot taken before the local server was turned on or off would not restore
    after. ``data`` itself is returned where its count is ``n_stream`` already, or where it is not
    laid out so (llama.cpp then refuses it, and the caller says so)."""
    if len(data) < _HEAD.size:
        return data
    magic, seq, n_from = _HEAD.unpack_from(data, 0)
    if magic != IO_MAGIC or n_from == n_stream or not 1 <= n_from <= MAX_STREAMS:
        return data
    start, skipped = _HEAD.size, 0
    while skipped < n_from and start + 4 <= len(data) and _COUNT.unpack_from(data, start)[0] == 0:
        start, skipped = start + 4, skipped + 1
    after = 4 * (n_from - skipped - 1)  # the empty streams after the sequence's: a zero count each
    end = len(data) - max(after, 0)
    if skipped == n_from or end <= start or any(data[end:]):
        return data
    out = bytearray(_HEAD.pack(magic, seq, n_stream))
    out += memoryview(data)[start:end]
    out += bytes(4 * (n_stream - 1))
    return out


def put(ctx: object, data: bytearray, seq: int = 0, n_stream: int | None = None) -> None:
    """Write a state back into sequence ``seq`` (which the caller emptied). ``n_stream``: the context's
    KV streams where its states are a plain KV cache's (``restream``); None leaves the state as taken."""
    if n_stream is not None:
        data = restream(data, n_stream)
    ok = lc.llama_state_seq_set_data(ctx, (ctypes.c_uint8 * len(data)).from_buffer(data), len(data), seq)
    if not ok:
        raise HearthError("could not restore a KV snapshot (it was taken from another model or context)")


def to_bytes(state: tuple) -> bytes:
    """The state with its shifts in front: one copy of the state (bytes + bytearray), as
    ``bytes(state)`` made before; the store's ``bytes()`` of it then copies nothing."""
    shifts: Shifts = state[2] if len(state) > 2 else ()
    head = _COUNT.pack(len(shifts)) + b"".join(_PAIR.pack(i, d) for i, d in shifts)
    return head + state[1]


def from_bytes(n_tokens: int, data: bytearray) -> State:
    """Inverse of ``to_bytes``; ``data`` is trimmed in place (no copy of the state)."""
    if len(data) < _COUNT.size:
        raise HearthError("a stored KV snapshot is too short to be one")
    (count,) = _COUNT.unpack_from(data, 0)
    end = _COUNT.size + count * _PAIR.size
    if count > n_tokens or len(data) < end:
        raise HearthError("a stored KV snapshot's image positions are damaged")
    shifts = tuple(_PAIR.unpack_from(data, _COUNT.size + k * _PAIR.size) for k in range(count))
    if any(not 0 < i <= n_tokens or d < 0 for i, d in shifts):
        raise HearthError("a stored KV snapshot's image positions are damaged")
    del data[:end]  # CPython drops a bytearray's head without moving the rest
    return (n_tokens, data, shifts)

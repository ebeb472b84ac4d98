"""An image's rows read into the context: a token list holding images, decoded piece by piece.

``forward_mixed`` is the backend's forward for a token list with image positions in it: each run of text
goes in as tokens, each image's rows (encoded by the projector, mtmd.py) as embeddings in a batch of their
own; ``decode_rows`` is the one ``llama_decode`` of such rows, M-RoPE positions included, that both the
single-sequence forward and the sequences' batch (sequences.py) call.
"""
from __future__ import annotations

import ctypes
from typing import Protocol, Sequence

import llama_cpp as lc
import numpy as np

from ...errors import Cancelled, ContextFullError, HearthError
from ...inputs.media import slot_row
from .log import _log_mark, decode_error
from .mtmd import Projector


def forward_mixed(backend: "MixedForward", proj: Projector, tokens: Sequence[int], all_logits: bool,
                  seq: int = 0) -> np.ndarray:
    """``backend.forward`` for a token list holding images: text runs as text, each image chunk's
    rows as embeddings in one batch of their own (where the model attends across an image at once,
    its rows must not be split; ``engine.media.whole`` keeps callers from splitting one)."""
    outs: list[np.ndarray] = []
    i, n = 0, len(tokens)
    while i < n:
        j = i
        if tokens[i] >= 0:
            while j < n and tokens[j] >= 0:
                j += 1
            out = backend.forward_text(tokens[i:j], all_logits=all_logits, seq=seq)
        else:
            slot, row = slot_row(tokens[i])
            while j < n and tokens[j] < 0 and slot_row(tokens[j]) == (slot, row + j - i):
                j += 1
            rows = proj.embeddings(slot)[row:row + j - i]
            grid = proj.mrope_positions(slot)
            if (proj.non_causal(slot) or grid is not None) and (row or row + j - i < len(proj.embeddings(slot))):
                raise HearthError("an image was split across two batches; this model reads each image whole")
            out = backend.forward_embd(rows, all_logits=all_logits or j == n, non_causal=proj.non_causal(slot),
                                       mrope=grid, seq=seq)
        outs.append(out if all_logits else out.copy())
        i = j
    if all_logits:
        return np.concatenate([o if o.ndim == 2 else o[None, :] for o in outs])
    return outs[-1] if outs[-1].ndim == 1 else outs[-1][-1]


def decode_rows(ctx: object, rows: np.ndarray, n_past: int, n_vocab: int, all_logits: bool,
                non_causal: bool, grid: np.ndarray | None = None, seq: int = 0) -> np.ndarray:
    """One llama_decode of embedding rows at positions n_past.. of sequence ``seq`` (``grid``: M-RoPE
    positions, 4 x n, section-major); logits of every row or the last."""
    m, width = rows.shape
    batch = lc.llama_batch_init(m, width, 1)
    # llama_batch_free frees the batch's own pos array: keep its address (a ctypes pointer field
    # read back would follow the field, not the address) and put it back before.
    own_pos = ctypes.cast(batch.pos, ctypes.c_void_p).value
    if grid is not None:
        flat = (lc.llama_pos * (4 * m))(*np.ascontiguousarray(grid, dtype=np.int64).reshape(-1).tolist())
        batch.pos = ctypes.cast(flat, ctypes.POINTER(lc.llama_pos))
    try:
        ctypes.memmove(batch.embd, np.ascontiguousarray(rows, dtype=np.float32).ctypes.data, m * width * 4)
        for i in range(m):
            if grid is None:
                batch.pos[i] = n_past + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = all_logits or i == m - 1
        batch.n_tokens = m
        if non_causal:
            lc.llama_set_causal_attn(ctx, False)
        mark = _log_mark()
        try:
            rc = lc.llama_decode(ctx, batch)
        finally:
            if non_causal:
                lc.llama_set_causal_attn(ctx, True)
        if rc == 1:
            raise ContextFullError("no room left in the KV cache for this image")
        if rc == 2:
            raise Cancelled("stopped while reading an image")
        if rc != 0:
            raise decode_error(rc, m, mark)
    finally:
        batch.pos = ctypes.cast(own_pos or 0, ctypes.POINTER(lc.llama_pos))
        lc.llama_batch_free(batch)
    if all_logits:
        return np.ctypeslib.as_array(lc.llama_get_logits(ctx), shape=(m, n_vocab)).copy()
    return np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))


class MixedForward(Protocol):
    """What ``forward_mixed`` needs of the backend (LlamaCppBackend has both)."""

    def forward_text(self, tokens: Sequence[int], *, all_logits: bool = False, seq: int = 0) -> np.ndarray: ...

    def forward_embd(self, rows: np.ndarray, *, all_logits: bool, non_causal: bool,
                     mrope: tuple[np.ndarray, np.ndarray, int] | None = None, seq: int = 0) -> np.ndarray: ...

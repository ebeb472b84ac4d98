"""Several sequences in one llama.cpp context: the multi-sequence step.

A second context on the already loaded model (the weights are shared, the
KV is its own) with ``n_seq`` sequences. One ``decode`` call is one
``llama_batch``: each row is a run of tokens of one sequence at consecutive
positions, and asks for the logits of its last token or not.

Each sequence has its own KV stream (``kv_unified=False``) by default. In a
unified cache a sequence's cells land wherever they are free, interleaved with
other sequences', and attention sums over them in that order: measured on the
bundled model, a sequence's logits beside another differed from its solo run
by up to 0.95 (greedy tokens held in that probe, but nothing guarantees it).
With a stream per sequence they are bit-identical to the solo run and to the
engine's own context. The price: sharing a prefix copies the source stream's
KV (a memory copy, no compute) instead of pointing at the same cells.
"""
from __future__ import annotations

from typing import Sequence

import llama_cpp as lc
import numpy as np

from ...errors import ContextFullError, HearthError, ModelLoadError
from .log import _log_mark, decode_error


class LlamaBatch:
    """A multi-sequence llama.cpp context sharing a loaded model's weights."""

    def __init__(self, model: object, *, n_seq: int, n_ctx: int, n_batch: int, n_vocab: int,
                 n_threads: int, type_kv: int, flash_attn: bool, unified: bool = False) -> None:
        self._ctx = self._batch = None
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = min(n_batch, 512)
        cparams.n_seq_max = n_seq
        cparams.kv_unified = unified
        cparams.n_threads = cparams.n_threads_batch = n_threads
        cparams.type_k = cparams.type_v = type_kv
        # The same kernels as the single-sequence context, so a sequence's
        # tokens are computed the same way beside others as alone.
        cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_AUTO if flash_attn else lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cparams.no_perf = True
        self._ctx = lc.llama_init_from_model(model, cparams)
        if not self._ctx:
            raise ModelLoadError(f"not enough memory for a {n_ctx}-token context of {n_seq} sequences")
        self.n_seq = n_seq
        self.unified = unified
        self.n_ctx = lc.llama_n_ctx(self._ctx)
        self.n_batch = n_batch
        self.n_vocab = n_vocab
        self._mem = lc.llama_get_memory(self._ctx)
        self._batch = lc.llama_batch_init(n_batch, 0, 1)

    def decode(self, rows: Sequence[tuple[int, Sequence[int], int, bool]]) -> list[np.ndarray | None]:
        """One llama_batch of ``rows``: (seq id, tokens, position of the first, want logits).

        Returns, per row, the logits of its last token (a view the next call
        overwrites) or None. At most ``n_batch`` tokens in all. On failure
        nothing of this batch stays in the KV."""
        batch = self._batch
        if batch is None:
            raise HearthError("the batch context is closed")
        n = 0
        where: list[int] = []
        for seq, tokens, pos, want in rows:
            if n + len(tokens) > self.n_batch:
                raise ValueError(f"a batch holds at most {self.n_batch} tokens")
            for i, t in enumerate(tokens):
                batch.token[n] = t
                batch.pos[n] = pos + i
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq
                batch.logits[n] = False
                n += 1
            batch.logits[n - 1] = want
            where.append(n - 1 if want else -1)
        if n == 0:
            return []
        batch.n_tokens = n
        mark = _log_mark()
        rc = lc.llama_decode(self._ctx, batch)
        if rc != 0:
            for seq, _tokens, pos, _want in rows:
                lc.llama_memory_seq_rm(self._mem, seq, pos, -1)
            if rc == 1:
                raise ContextFullError("no room left in the KV cache for this batch")
            raise decode_error(rc, n, mark)
        out: list[np.ndarray | None] = []
        for i in where:
            if i < 0:
                out.append(None)
            else:
                ptr = lc.llama_get_logits_ith(self._ctx, i)
                out.append(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)))
        return out

    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> None:
        """Drop sequence ``seq``'s cells at positions [p0, p1) (p1 < 0: to the end)."""
        if not lc.llama_memory_seq_rm(self._mem, seq, p0, p1):
            raise HearthError("this model's memory cannot be partially rolled back")

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Make ``dst`` hold ``src``'s first ``n`` positions (and nothing else)."""
        lc.llama_memory_seq_rm(self._mem, dst, -1, -1)
        if self.unified:
            lc.llama_memory_seq_cp(self._mem, src, dst, 0, n)  # shares the cells
        else:
            # Between streams llama.cpp copies whole streams only: copy, then cut.
            lc.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
            lc.llama_memory_seq_rm(self._mem, dst, n, -1)

    def seq_len(self, seq: int) -> int:
        """How many positions sequence ``seq`` holds (0 when empty)."""
        hi = lc.llama_memory_seq_pos_max(self._mem, seq)
        return 0 if hi < 0 else hi + 1

    def close(self) -> None:
        if self._batch is not None:
            lc.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            lc.llama_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: ctypes may already be gone
            pass

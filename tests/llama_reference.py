"""llama.cpp driven directly, the way its server drives a slot: the reference a context shift is
checked against (tests/test_context_shift.py).

A second context on a loaded backend's model, opened with the backend's own context parameters
and one sequence, fed with ``llama_decode`` and moved with llama-server's own calls: its context
shift (``n_keep``, ``n_discard = n_left / 2``, ``llama_memory_seq_rm`` + ``llama_memory_seq_add``)
and its cache reuse (``--cache-reuse N``). Nothing of Hearth's KV code runs here.
"""
from __future__ import annotations

from typing import Sequence

import llama_cpp as lc
import numpy as np

from engine.backends.llama.params import context_params
from engine.kv.reuse import PREFILL_CHUNK


class PlainContext:
    """One llama.cpp sequence on ``backend``'s model, with ``backend``'s context parameters."""

    def __init__(self, backend) -> None:
        cparams, _ = context_params(n_ctx=backend.n_ctx, n_batch=backend.n_batch, n_threads=backend.n_threads,
                                    kv_type=backend.kv_type, flash_attn=backend.flash_attn,
                                    n_gpu_layers=backend.n_gpu_layers, n_seq=1)
        self.ctx = lc.llama_init_from_model(backend._model, cparams)
        assert self.ctx
        self.mem = lc.llama_get_memory(self.ctx)
        self.batch = lc.llama_batch_init(backend.n_batch, 0, 1)
        self.n_vocab, self.n_ctx, self.n_past = backend.n_vocab, backend.n_ctx, 0

    def decode(self, tokens: Sequence[int]) -> np.ndarray:
        """``tokens`` at the next positions in one batch; the last one's logits."""
        b = self.batch
        for i, t in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i] = t, self.n_past + i, 1
            b.seq_id[i][0] = 0
            b.logits[i] = i == len(tokens) - 1
        b.n_tokens = len(tokens)
        assert lc.llama_decode(self.ctx, b) == 0
        self.n_past += len(tokens)
        return np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ctx, len(tokens) - 1),
                                     shape=(self.n_vocab,)).copy()

    def read(self, tokens: Sequence[int], chunk: int = PREFILL_CHUNK) -> np.ndarray:
        """A prompt in the engine core's chunks; the last token's logits."""
        logits = None
        for s in range(0, len(tokens), chunk):
            logits = self.decode(tokens[s:s + chunk])
        assert logits is not None
        return logits

    def context_shift(self, n_keep: int) -> int:
        """llama-server's context shift (server-context.cpp, ``update_slots``); returns n_discard."""
        n_keep = min(self.n_ctx - 4, n_keep)
        n_left = self.n_past - n_keep
        n_discard = n_left // 2
        lc.llama_memory_seq_rm(self.mem, 0, n_keep, n_keep + n_discard)
        lc.llama_memory_seq_add(self.mem, 0, n_keep + n_discard, self.n_past, -n_discard)
        self.n_past -= n_discard
        return n_discard

    def cache_reuse(self, cache: list[int], prompt: Sequence[int], n_reuse: int) -> int:
        """llama-server's cache reuse of ``cache`` (what the sequence holds) for ``prompt``: after the
        common prefix, chunks of at least ``n_reuse`` tokens found again are shifted into place.
        Returns how many prompt tokens the sequence then holds (its n_past)."""
        n_past = 0
        while n_past < min(len(cache), len(prompt)) and cache[n_past] == prompt[n_past]:
            n_past += 1
        n_past = min(n_past, len(prompt) - 1)
        head_c = head_p = n_past
        while head_c < len(cache) and head_p < len(prompt):
            n_match = 0
            while head_c + n_match < len(cache) and head_p + n_match < len(prompt) \
                    and cache[head_c + n_match] == prompt[head_p + n_match]:
                n_match += 1
            if n_match >= n_reuse:
                kv_shift = head_p - head_c
                lc.llama_memory_seq_rm(self.mem, 0, head_p, head_c)
                lc.llama_memory_seq_add(self.mem, 0, head_c, head_c + n_match, kv_shift)
                for i in range(n_match):
                    cache[head_p + i] = cache[head_c + i]
                    n_past += 1
                head_c += n_match
                head_p += n_match
            else:
                head_c += 1
        lc.llama_memory_seq_rm(self.mem, 0, n_past, -1)
        self.n_past = n_past
        return n_past

    def close(self) -> None:
        lc.llama_batch_free(self.batch)
        lc.llama_free(self.ctx)


def greedy_with_context_shift(backend, prompt: Sequence[int], n_keep: int, max_tokens: int) -> list[int]:
    """llama-server's generation with ``--context-shift``: greedy, and a shift whenever the slot's
    tokens and one more reach the context."""
    ref = PlainContext(backend)
    try:
        logits = ref.read(prompt)
        out: list[int] = []
        while True:
            tok = int(np.argmax(logits))
            out.append(tok)
            if len(out) == max_tokens:
                return out
            if ref.n_past + 1 >= ref.n_ctx:
                ref.context_shift(n_keep)
            logits = ref.decode([tok])
    finally:
        ref.close()

"""A tiny, fully-specified language model implementing the Backend protocol.

Its next-token logits are a fixed random function of the last two tokens and
the position, so its exact output distribution can be computed by hand. Used
to test the speculative accept rule statistically and the loop's rollback
logic on many draft lengths quickly; the real models are tested elsewhere.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


class TinyBackend:
    name = "tiny"
    chat_template = None
    bos_token = ""
    eos_token = ""
    add_bos = False

    def __init__(self, n_vocab: int = 8, seed: int = 0, n_ctx: int = 512, eos: int | None = None,
                 sharpness: float = 1.0) -> None:
        rng = np.random.default_rng(seed)
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.table = (rng.standard_normal((7, n_vocab, n_vocab, n_vocab)) * sharpness).astype(np.float32)
        self.eos_ids = frozenset() if eos is None else frozenset({eos})
        self._kv: list[int] = []
        self.forward_calls = 0

    def logits_after(self, seq: Sequence[int]) -> np.ndarray:
        a = seq[-2] if len(seq) > 1 else 0
        b = seq[-1]
        return self.table[len(seq) % 7, a, b].copy()

    sees_images = False

    def tokenize_images(self, pieces, *, add_bos: bool) -> list[int]:
        from engine.errors import NoVisionError

        raise NoVisionError("the tiny backend reads text only")

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        return [ord(c) % self.n_vocab for c in text]

    def token_bytes(self, token_id: int) -> bytes:
        return bytes([97 + token_id % 26])

    @property
    def kv_len(self) -> int:
        return len(self._kv)

    def forward(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        if len(self._kv) + len(tokens) > self.n_ctx:
            raise RuntimeError("context full")
        self.forward_calls += 1
        rows = []
        for t in tokens:
            self._kv.append(int(t))
            rows.append(self.logits_after(self._kv))
        return np.stack(rows) if all_logits else rows[-1]

    def truncate(self, n: int) -> None:
        del self._kv[max(0, n):]

    def snapshot(self):
        return list(self._kv)

    def restore(self, state) -> None:
        self._kv = list(state)

    def nbytes(self, state) -> int:
        return 8 * len(state)

    def pool(self):
        from engine.backends.base import SingleSequencePool

        return SingleSequencePool(self)

    def set_abort(self, flag) -> None:
        pass

    def memory_report(self) -> dict[str, int]:
        return {"weights": self.table.nbytes}

    def close(self) -> None:
        pass

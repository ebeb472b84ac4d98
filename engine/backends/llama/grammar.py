"""A GBNF grammar (llama.cpp's grammar language) as a token constraint.

llama.cpp's own grammar sampler does the work: it knows every token's text
and the grammar's parse stacks, and sets the logit of each token the grammar
cannot accept next to -inf. It is driven here over one reusable
``llama_token_data`` array of the whole vocabulary, so the rest of sampling
(penalties, top-k/p, temperature, the RNG) stays Hearth's one sampler.
"""
from __future__ import annotations

import ctypes

import llama_cpp as lc
import numpy as np

from ...errors import GrammarError

# The C struct llama_token_data {int32 id; float logit; float p;} as a numpy record.
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)


class LlamaGrammar:
    """One request's grammar state: ``mask`` the logits, ``accept`` each chosen token."""

    def __init__(self, vocab: ctypes.c_void_p, n_vocab: int, gbnf: str, *, root: str = "root",
                 triggers: tuple[str, ...] = ()) -> None:
        """``triggers``: llama.cpp's lazy grammar. Nothing is masked until one of these regexes
        matches the text accepted so far; the grammar is then fed from the pattern's first group
        (a tool call's opener) and constrains everything after it."""
        if not gbnf.strip():
            raise GrammarError("the grammar is empty")
        if triggers:
            pats = [t.encode("utf-8") for t in triggers]
            arr = (ctypes.c_char_p * len(pats))(*pats)
            self._smpl = lc.llama_sampler_init_grammar_lazy_patterns(
                vocab, gbnf.encode("utf-8"), root.encode("utf-8"), arr, len(pats), None, 0)
        else:
            self._smpl = lc.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), root.encode("utf-8"))
        if not self._smpl:
            raise GrammarError("the grammar could not be parsed (llama.cpp GBNF syntax, with a 'root' rule)")
        self._data = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self._data["id"] = np.arange(n_vocab, dtype=np.int32)
        self._array = lc.llama_token_data_array(
            data=self._data.ctypes.data_as(lc.llama_token_data_p), size=n_vocab, selected=-1, sorted=False)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of ``logits`` with every token the grammar rejects here at -inf."""
        if self._smpl is None:
            raise GrammarError("the grammar was closed")
        n = self._data.size
        self._data["logit"] = logits[:n]
        self._array.size = n
        self._array.selected = -1
        self._array.sorted = False
        lc.llama_sampler_apply(self._smpl, ctypes.byref(self._array))
        out = np.array(logits, dtype=np.float32)
        out[:n] = self._data["logit"]
        return out

    def takes(self, token: int) -> bool:
        """Whether the grammar allows ``token`` next: ``mask`` for one token, not the whole vocabulary."""
        if self._smpl is None:
            raise GrammarError("the grammar was closed")
        one = np.zeros(1, dtype=_TOKEN_DATA)
        one["id"] = token
        arr = lc.llama_token_data_array(data=one.ctypes.data_as(lc.llama_token_data_p), size=1, selected=-1,
                                        sorted=False)
        lc.llama_sampler_apply(self._smpl, ctypes.byref(arr))
        return bool(np.isfinite(one["logit"][0]))

    def accept(self, token: int) -> None:
        """Advance the grammar past ``token`` (one the mask allowed)."""
        if self._smpl is not None:
            lc.llama_sampler_accept(self._smpl, int(token))

    def reset(self) -> None:
        """Back to the grammar's start (a lazy grammar waits for its trigger again)."""
        if self._smpl is not None:
            lc.llama_sampler_reset(self._smpl)

    def close(self) -> None:
        if self._smpl is not None:
            lc.llama_sampler_free(self._smpl)
            self._smpl = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: ctypes may already be gone
            pass

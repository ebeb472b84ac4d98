"""Constrained sampling: a grammar's mask in front of the one sampler.

A backend turns grammar text into a :class:`TokenConstraint` (llama.cpp
compiles GBNF against its vocabulary); :class:`ConstrainedSampler` puts the
mask in front of any sampler and tells the constraint which token was chosen.
Written once, used by the engine's single-sequence loop and by the serving
scheduler's batched one.
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np

from .errors import HearthError


class TokenConstraint(Protocol):
    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of ``logits`` with every token not allowed next at -inf."""

    def accept(self, token: int) -> None:
        """Advance past ``token``."""

    def close(self) -> None:
        """Free the constraint's native state."""


class GrammarError(HearthError):
    """A grammar that cannot be used (bad syntax, or a backend without grammars)."""


class ConstrainedSampler:
    """``sampler`` restricted to what ``constraint`` allows; same call shape as a Sampler."""

    __slots__ = ("inner", "constraint")

    def __init__(self, inner: Callable[[Sequence[int], np.ndarray], int], constraint: TokenConstraint) -> None:
        self.inner = inner
        self.constraint = constraint

    def __call__(self, history: Sequence[int], logits: np.ndarray) -> int:
        tok = self.inner(history, self.constraint.mask(logits))
        self.constraint.accept(tok)
        return tok

    def close(self) -> None:
        self.constraint.close()

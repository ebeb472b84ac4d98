"""Constrained sampling: a grammar's mask in front of the one sampler.

A backend turns grammar text into a :class:`TokenConstraint` (llama.cpp
compiles GBNF against its vocabulary); :class:`ConstrainedSampler` puts the
mask in front of any sampler and tells the constraint which token was chosen.
Written once, used by the engine's single-sequence loop and by the serving
scheduler's batched one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, Sequence

import numpy as np

from ..errors import NoGrammar

if TYPE_CHECKING:
    from ..backends.base import Backend, TokenConstraint
    from ..reply_formats.tools import ToolPlan
    from .call_closing import CallClosing


def tool_constraint(backend: "Backend", plan: "ToolPlan", gbnf: str | None = None) -> TokenConstraint | None:
    """The grammar every call of ``plan`` follows (``gbnf``: its text, where it was built already); None on a
    backend without grammars, whose calls are parsed and validated instead (ToolCallParser)."""
    try:
        return backend.grammar(plan.grammar() if gbnf is None else gbnf, plan.triggers())
    except NoGrammar:
        return None


class Gate(Protocol):
    free: bool                # True: sample without the constraint (the reply is inside its reasoning block)
    opening: str | None       # the reply so far while it may still open a reasoning block, else None

    def may_open(self, token: int) -> bool:
        """Whether ``token`` opens (or goes on opening) the reasoning block; such a token is
        taken as the model chose it, outside the grammar."""


class ConstrainedSampler:
    """``sampler`` restricted to what ``constraint`` allows; same call shape as a Sampler.

    ``gate``: while ``gate.free`` the constraint is skipped and sees none of the
    tokens: a thinking model reasons freely and the grammar shapes only its
    answer, from the first token after the reasoning block (generate.Steering).
    Before the reply has shown whether it thinks, the model's own choice is
    drawn first: a token that opens the block is kept (the grammar never sees
    it), any other is drawn again under the grammar, which from then on owns
    the reply's start (a grammar may write the open tag itself).

    ``closing``: a forced tool call's check that the call can still close in the tokens left
    (call_closing.py), which picks each token the constraint takes.
    """

    __slots__ = ("inner", "constraint", "gate", "accepted", "closing")

    def __init__(self, inner: Callable[[Sequence[int], np.ndarray], int], constraint: TokenConstraint,
                 gate: Gate | None = None, closing: CallClosing | None = None) -> None:
        self.inner = inner
        self.constraint = constraint
        self.gate = gate
        self.closing = closing
        self.accepted: list[tuple[int, int]] = []  # (position, token) of every token the constraint took

    def rewind(self, position: int, inner: Callable[[Sequence[int], np.ndarray], int]) -> None:
        """Back to the constraint's state before ``position`` (the grammar reset, then fed again the
        tokens it took before it), sampling with ``inner`` from here on."""
        self.accepted = [(p, t) for p, t in self.accepted if p < position]
        self.constraint.reset()
        for _p, t in self.accepted:
            self.constraint.accept(t)
        if self.closing is not None:
            self.closing.rewind(len(self.accepted))
        self.inner = inner

    def __call__(self, history: Sequence[int], logits: np.ndarray) -> int:
        gate = self.gate
        if gate is not None:
            if gate.free:
                return self.inner(history, logits)
            if gate.opening is not None:
                tok = self.inner(history, logits)
                if gate.may_open(tok):
                    return tok
        masked = self.constraint.mask(logits)
        if self.closing is None:
            tok = self.inner(history, masked)
        else:
            tok = self.closing.choose(history, masked, lambda lg: self.inner(history, lg))
        self.constraint.accept(tok)
        self.accepted.append((len(history), tok))
        if gate is not None:
            gate.opening = None  # the grammar wrote the reply's start: it owns what the block's tags are
        return tok

    def close(self) -> None:
        self.constraint.close()

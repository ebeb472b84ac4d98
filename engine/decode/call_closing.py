"""A forced tool call closes within the reply's token budget.

A reply made to call a tool (``tool_choice`` required, or a tool's name) is written under the
call's grammar, but the grammar alone does not know the budget: a reply that reaches
``max_tokens`` (or the end of the context) inside its call ends with no call at all. So the
sampler checks, token by token, that the call can still close in the tokens left: the
grammar's shortest completion from where the reply stands (reply_formats/grammar_walk.py),
spelled in the fewest tokens of the vocabulary, plus the end-of-generation token. A token
the model draws that would leave too little room is drawn again among the tokens that begin
the shortest completion (and still leave room), so the call closes validly, at the last
moment, and a call that had room is never touched: the same draws as without the check.

A reply whose budget cannot hold even the shortest call (``NoRoomForCall``) ends before its
first token under the grammar, with a note that says so, not with half a call.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from ..reply_formats.gbnf import GbnfError
from ..reply_formats.grammar_walk import State, Walk, WalkError, walk_for

if TYPE_CHECKING:
    from ..backends.base import Backend

Draw = Callable[[np.ndarray], int]


class NoRoomForCall(Exception):
    """The tokens left cannot hold the shortest complete call: the reply ends, no call is written."""

    def __init__(self, left: int, need: float, what: str, reason: str = "max_tokens") -> None:
        shortest = "no complete call can be written" if math.isinf(need) else \
            f"the shortest complete call takes {int(need)}"
        super().__init__(f"no tool call: {max(0, left)} tokens were left of {what} and {shortest}; "
                         "the reply ends without one")
        self.left, self.need, self.reason = left, need, reason  # reason: the finish, "max_tokens" or "context_full"


@dataclass(frozen=True, slots=True)
class Pieces:
    """A vocabulary as llama.cpp's grammar reads it: each token's bytes (control tokens spelled out),
    the end-of-generation tokens apart."""
    of_token: tuple[bytes, ...]
    by_bytes: dict[bytes, tuple[int, ...]]
    longest: int
    singles: frozenset[int]  # the byte values that are a token by themselves

    def fewest(self, text: bytes) -> list[float]:
        """``out[j]``: the fewest tokens that spell ``text[j:]`` (inf where none does)."""
        n = len(text)
        out = [math.inf] * (n + 1)
        out[n] = 0
        by = self.by_bytes
        for j in range(n - 1, -1, -1):
            best = math.inf
            for k in range(j + 1, min(n, j + self.longest) + 1):
                if out[k] + 1 < best and text[j:k] in by:
                    best = out[k] + 1
            out[j] = best
        return out

    def count(self, text: bytes) -> float:
        """The fewest tokens that spell ``text``."""
        return self.fewest(text)[0]


_PIECES: "weakref.WeakKeyDictionary[object, Pieces]" = weakref.WeakKeyDictionary()


def pieces_of(backend: "Backend") -> Pieces:
    """``backend``'s vocabulary as its grammar reads it (built once per model: a pass over the vocabulary)."""
    got = _PIECES.get(backend)
    if got is not None:
        return got
    spell = getattr(backend, "special_bytes", None) or backend.token_bytes
    eos = backend.eos_ids
    of_token = tuple(spell(t) for t in range(backend.n_vocab))
    by_bytes: dict[bytes, list[int]] = {}
    for t, piece in enumerate(of_token):
        if piece and piece[0] != 0 and t not in eos:  # what llama.cpp's grammar never takes, left out
            by_bytes.setdefault(piece, []).append(t)
    made = Pieces(of_token, {k: tuple(v) for k, v in by_bytes.items()}, max(map(len, by_bytes), default=1),
                  frozenset(p[0] for p in by_bytes if len(p) == 1))
    _PIECES[backend] = made
    return made


class CallClosing:
    """One reply's check that its forced call can close in the tokens left (``choose``).

    ``end``: the history length the reply may reach (its prompt plus ``max_tokens``, or the
    context). ``states[k]``: where the grammar stands after the k-th token it took, with the
    completion the reply was steered onto (None: the shortest, worked out when needed); None
    once the walker lost the reply (text it cannot follow: the check stops, the grammar goes on).
    """

    def __init__(self, walk: Walk, pieces: Pieces, eos: frozenset[int], end: int, what: str,
                 reason: str = "max_tokens") -> None:
        self.walk, self.pieces, self.eos, self.end, self.what, self.reason = walk, pieces, eos, end, what, reason
        self.states: list[tuple[State, bytes | None] | None] = [(walk.start(), None)]
        self.bytewise = pieces.singles.issuperset(walk.byte_values)  # a completion's n bytes take n tokens at most
        self.steered = 0  # tokens drawn again to close the call

    def rewind(self, kept: int) -> None:
        """Back to where the grammar stood after its first ``kept`` tokens (a call drawn again)."""
        del self.states[kept + 1:]

    def _room(self, state: State, plan: bytes | None, slots: int) -> tuple[float, bytes | None]:
        """The tokens ``state`` still needs to end (its completion, then end-of-generation), and the completion
        when it was worked out; a plain upper bound where one shows the call fits in ``slots``."""
        if plan is None and self.bytewise and not state.partial and state.need + 1 <= slots:
            return state.need + 1, None
        if plan is None:
            plan = self.walk.shortest(state)
            if plan is None:
                return math.inf, None
        return self.pieces.count(plan) + 1, plan

    def choose(self, history: Sequence[int], masked: np.ndarray, draw: Draw) -> int:
        """The next token: ``draw`` over the grammar's ``masked`` logits, drawn again among the shortest
        completion's first tokens where the model's own choice would leave the call no room to close."""
        cur = self.states[-1]
        if cur is None:
            tok = draw(masked)
            self.states.append(None)
            return tok
        state, plan = cur
        left = self.end - len(history)  # tokens the reply may still write, this one included
        need, plan = self._room(state, plan, left)
        if need > left:
            raise NoRoomForCall(left, need, self.what, self.reason)
        tok = draw(masked)
        nxt = self._after(state, tok)
        if nxt is None:  # the grammar took a token the walker cannot follow: stop checking
            self.states.append(None)
            return tok
        if tok in self.eos or self._room(nxt, None, left - 1)[0] <= left - 1:
            self.states.append((nxt, None))
            return tok
        if plan is None:
            plan = self.walk.shortest(state)
        steered = self._steer(masked, plan or b"", left)
        if steered is None:  # llama.cpp's grammar and the walker disagree: the model's token stands
            self.states.append(None)
            return tok
        tok = draw(steered)
        self.steered += 1
        nxt = self._after(state, tok)
        piece = b"" if tok in self.eos else self.pieces.of_token[tok]
        self.states.append(None if nxt is None else (nxt, (plan or b"")[len(piece):]))
        return tok

    def _after(self, state: State, tok: int) -> State | None:
        if tok in self.eos:
            return state
        return self.walk.feed(state, self.pieces.of_token[tok])

    def _steer(self, masked: np.ndarray, plan: bytes, left: int) -> np.ndarray | None:
        """``masked`` with only the tokens that begin ``plan`` and leave room for the rest of it (the
        end-of-generation tokens where ``plan`` is empty); None if the grammar allows none of them."""
        if plan:
            rest = self.pieces.fewest(plan)
            keep = [t for k in range(1, min(len(plan), self.pieces.longest) + 1)
                    if rest[k] + 2 <= left for t in self.pieces.by_bytes.get(plan[:k], ())]
        else:
            keep = list(self.eos)
        ids = np.array([t for t in keep if t < masked.size and np.isfinite(masked[t])], dtype=np.int64)
        if ids.size == 0:
            return None
        out = np.full_like(masked, -np.inf)
        out[ids] = masked[ids]
        return out


def call_closing(backend: "Backend", grammar: str, *, prompt_len: int, limit: int,
                 n_ctx: int) -> CallClosing | None:
    """The check for a forced call under ``grammar`` (GBNF) in a reply of ``prompt_len`` prompt tokens and at
    most ``limit`` more in a context of ``n_ctx``; None where the grammar is one the walker cannot follow."""
    try:
        walk = walk_for(grammar)
    except (GbnfError, WalkError):
        return None
    room = n_ctx - prompt_len
    by_limit = limit <= room
    what = f"max_tokens ({limit})" if by_limit else f"the context ({n_ctx} tokens)"
    return CallClosing(walk, pieces_of(backend), backend.eos_ids, prompt_len + min(limit, room), what,
                       "max_tokens" if by_limit else "context_full")

"""Where a reply stands in its grammar, and the shortest text that completes it.

llama.cpp's grammar sampler keeps its parse stacks to itself, so a forced tool call
(decode/call_closing.py) follows the same GBNF here, the way llama.cpp does: a state is the
set of stacks the text so far leaves open (each stack's top is a character class, an empty
stack means the grammar is complete), and each character moves every stack that takes it.
Counted repetitions stay counts on a stack (``jchar{0,2048}`` is one frame, not 2,048 rules).
Text goes in as bytes and is decoded as llama.cpp decodes a token's piece (a character split
across tokens waits for its last byte).

Every rule's shortest text is known (a fixed point over the rules, in UTF-8 bytes), so each
stack knows the bytes it still needs, and ``shortest`` writes the completion: the grammar's
first shortest alternative at each choice, and for a character class a plain character
(a lowercase letter, then ``1``-``9``, ``0``...: a date comes out ``1111-01-01``, not year 0).
"""
from __future__ import annotations

import codecs
import functools
import math
from dataclasses import dataclass
from typing import Optional

from .gbnf import CHAR, REF, UNBOUNDED, Element, Rules, parse_gbnf

PREFERRED = "abcdefghijklmnopqrstuvwxyz123456789" + "0ABCDEFGHIJKLMNOPQRSTUVWXYZ" + \
    "".join(chr(c) for c in range(0x21, 0x7F)) + " \n"
MAX_EXPANSION = 100_000   # frames one character may open (a left-recursive grammar never settles)
# A stack frame: (alternative, element index, repetitions done of that element, the frame below, bytes the
# stack still needs at least). None is the empty stack: the grammar is complete.
Node = Optional[tuple]


class WalkError(ValueError):
    """A grammar this walker cannot follow (left recursion, a rule with no finite text)."""


@dataclass(frozen=True, slots=True)
class State:
    """Where a text leaves the grammar: its open ``stacks`` and the bytes of a character not yet whole."""
    stacks: tuple[Node, ...]
    partial: bytes = b""

    @property
    def complete(self) -> bool:
        """The grammar may end here (an empty stack, and no character half written)."""
        return not self.partial and None in self.stacks

    @property
    def need(self) -> int:
        """The fewest bytes that complete the grammar (with a half-written character: a lower bound)."""
        return min(0 if n is None else n[4] for n in self.stacks)


def _pick(ranges: tuple[tuple[int, int], ...], negated: bool) -> str | None:
    """The character a shortest text writes for a class: a plain one where the class has it."""
    def takes(code: int) -> bool:
        return any(lo <= code <= hi for lo, hi in ranges) != negated
    for ch in PREFERRED:
        if takes(ord(ch)):
            return ch
    for code in range(0x110000):
        if not 0xD800 <= code <= 0xDFFF and takes(code):
            return chr(code)
    return None


class Walk:
    """One grammar, ready to follow: ``start()``, ``feed(state, piece)``, ``shortest(state)``."""

    def __init__(self, rules: Rules) -> None:
        self.alts, self.of_rule = rules.alts, rules.of_rule
        self.root = rules.root
        self.picks: dict[Element, str] = {}
        for alt in self.alts:
            for e in alt:
                if e[0] == CHAR and e not in self.picks:
                    ch = _pick(e[1], e[2])
                    if ch is not None:
                        self.picks[e] = ch
        # every byte a shortest completion can hold (where each is a token, n bytes take n tokens at most)
        self.byte_values = frozenset(b for ch in self.picks.values() for b in ch.encode())
        self.best: list[int | None] = [None] * len(self.of_rule)
        self.rule_min = self._fixed_point()
        if math.isinf(self.rule_min[self.root]):
            raise WalkError("the grammar's root has no finite text")
        # suffix[a][i]: the fewest bytes of alternative a's elements from i on (none repeated yet)
        self.suffix = [self._suffix(alt) for alt in self.alts]
        self._texts: dict[int, str] = {}

    # -- sizes -------------------------------------------------------------------

    def _elem(self, e: Element, done: int) -> float:
        if e[0] == CHAR:
            ch = self.picks.get(e)
            return math.inf if ch is None else len(ch.encode())
        if e[0] == REF:
            return self.rule_min[e[1]]
        left = max(0, e[2] - done)
        return 0 if left == 0 else left * self.rule_min[e[1]]

    def _cost(self, alt: tuple[Element, ...], start: int) -> float:
        return sum(self._elem(e, 0) for e in alt[start:])

    def _fixed_point(self) -> list[float]:
        """Each rule's fewest bytes, and its alternative that has them (``best``). A best alternative
        is only replaced by a strictly shorter one, so following best alternatives never loops: every
        rule one names got its final size before the rule that names it."""
        self.rule_min = [math.inf] * len(self.of_rule)
        changed = True
        while changed:
            changed = False
            for r, alts in enumerate(self.of_rule):
                for a in alts:
                    c = self._cost(self.alts[a], 0)
                    if c < self.rule_min[r]:
                        self.rule_min[r], self.best[r] = c, a
                        changed = True
        return self.rule_min

    def _suffix(self, alt: tuple[Element, ...]) -> list[float]:
        out = [0.0] * (len(alt) + 1)
        for i in range(len(alt) - 1, -1, -1):
            out[i] = out[i + 1] + self._elem(alt[i], 0)
        return out

    def _node(self, a: int, i: int, done: int, below: Node) -> Node:
        """The frame at element ``i`` of alternative ``a``; a finished frame is the one below it."""
        alt = self.alts[a]
        if i == len(alt):
            return below
        need = self._elem(alt[i], done) + self.suffix[a][i + 1] + (0 if below is None else below[4])
        return (a, i, done, below, need)

    # -- following text -----------------------------------------------------------

    def start(self) -> State:
        stacks = []
        for a in self.of_rule[self.root]:
            stacks.extend(self._expand(self._node(a, 0, 0, None)))
        return State(tuple(dict.fromkeys(stacks)))

    def _expand(self, node: Node) -> list[Node]:
        """The stacks ``node`` opens, each down to a character class (or empty: complete)."""
        out: list[Node] = []
        seen: set[Node] = set()
        todo = [node]
        while todo:
            n = todo.pop()
            if n is None:
                out.append(None)
                continue
            if n in seen:
                continue
            seen.add(n)
            if len(seen) > MAX_EXPANSION:
                raise WalkError("the grammar does not settle (left recursion?)")
            a, i, done, below, _ = n
            e = self.alts[a][i]
            if e[0] == CHAR:
                out.append(n)
                continue
            if e[0] == REF:
                after = self._node(a, i + 1, 0, below)
                todo.extend(self._node(b, 0, 0, after) for b in reversed(self.of_rule[e[1]]))
                continue
            rule, lo, hi = e[1], e[2], e[3]
            if done >= lo:
                todo.append(self._node(a, i + 1, 0, below))
            if hi == UNBOUNDED or done < hi:
                again = self._node(a, i, min(done + 1, lo) if hi == UNBOUNDED else done + 1, below)
                todo.extend(self._node(b, 0, 0, again) for b in reversed(self.of_rule[rule]))
        return out

    def _char(self, stacks: tuple[Node, ...], code: int) -> tuple[Node, ...]:
        out: dict[Node, None] = {}
        for n in stacks:
            if n is None:
                continue
            a, i, _done, below, _ = n
            _, ranges, negated = self.alts[a][i]
            if any(lo <= code <= hi for lo, hi in ranges) != negated:
                for m in self._expand(self._node(a, i + 1, 0, below)):
                    out[m] = None
        return tuple(out)

    def feed(self, state: State, piece: bytes) -> State | None:
        """The state after ``piece`` (a token's bytes); None if the grammar refuses it (or it is not UTF-8)."""
        data = state.partial + piece
        try:
            text, used = codecs.utf_8_decode(data, "strict", False)
        except UnicodeDecodeError:
            return None
        stacks = state.stacks
        for ch in text:
            stacks = self._char(stacks, ord(ch))
            if not stacks:
                return None
        return State(stacks, data[used:])

    # -- the shortest completion ---------------------------------------------------

    def _rule_text(self, r: int, busy: frozenset[int] = frozenset()) -> str:
        if r in self._texts:
            return self._texts[r]
        if r in busy:
            raise WalkError("a rule's shortest text refers to itself")
        a = self.best[r]
        assert a is not None
        text = "".join(self._elem_text(e, 0, busy | {r}) for e in self.alts[a])
        self._texts[r] = text
        return text

    def _elem_text(self, e: Element, done: int, busy: frozenset[int] = frozenset()) -> str:
        if e[0] == CHAR:
            return self.picks[e]
        if e[0] == REF:
            return self._rule_text(e[1], busy)
        times = max(0, e[2] - done)
        return self._rule_text(e[1], busy) * times if times else ""

    def _stack_text(self, n: Node) -> str:
        parts = []
        while n is not None:
            a, i, done, below, _ = n
            alt = self.alts[a]
            parts.append(self._elem_text(alt[i], done))
            parts.extend(self._elem_text(e, 0) for e in alt[i + 1:])
            n = below
        return "".join(parts)

    def shortest(self, state: State) -> bytes | None:
        """The fewest bytes that complete the grammar from ``state`` (None: nothing does)."""
        if state.partial:
            return self._finish_char(state)
        if None in state.stacks:
            return b""
        best = min((n for n in state.stacks if n is not None), key=lambda n: n[4])  # the first of the shortest
        return None if math.isinf(best[4]) else self._stack_text(best).encode()

    def _finish_char(self, state: State) -> bytes | None:
        """A half-written character finished as the smallest character it can become that a stack takes
        (the stacks by what they still need), then the rest."""
        have = state.partial
        width = 2 if have[0] < 0xE0 else 3 if have[0] < 0xF0 else 4
        missing = width - len(have)
        value = have[0] & (0xFF >> (width + 1))
        for b in have[1:]:
            value = value << 6 | b & 0x3F
        low = max(value << 6 * missing, (0x80, 0x800, 0x10000)[width - 2])
        high = min(value << 6 * missing | (1 << 6 * missing) - 1, 0x10FFFF)
        for n in sorted((n for n in state.stacks if n is not None), key=lambda n: n[4]):
            _, ranges, negated = self.alts[n[0]][n[1]]
            code = _smallest(ranges, negated, low, high)
            if code is not None:
                extra = chr(code).encode()[len(have):]
                nxt = self.feed(state, extra)
                rest = None if nxt is None else self.shortest(nxt)
                if rest is not None:
                    return extra + rest
        return None


def _smallest(ranges: tuple[tuple[int, int], ...], negated: bool, low: int, high: int) -> int | None:
    """The smallest code point from ``low`` to ``high`` a class takes (never a surrogate), or None."""
    out = ((0xD800, 0xDFFF),) + (ranges if negated else ())
    inside = [(max(lo, low), hi) for lo, hi in ranges if hi >= low and lo <= high] if not negated else [(low, high)]
    for lo, hi in sorted(inside):
        code, moved = lo, True
        while moved:  # step past every excluded run that holds the candidate
            moved = False
            for a, b in out:
                if a <= code <= b:
                    code, moved = b + 1, True
        if code <= min(hi, high):
            return code
    return None


@functools.lru_cache(maxsize=16)
def walk_for(gbnf: str) -> Walk:
    """The walker of a grammar text (kept for the last few: an agent sends the same tools every turn)."""
    return Walk(parse_gbnf(gbnf))

"""GBNF (llama.cpp's grammar language) read into flat rules that Python can walk.

llama.cpp compiles a grammar for its sampler and keeps the result to itself; Hearth needs to
walk the same grammar too (grammar_walk.py: where a reply stands in it, and the shortest text
that completes it). ``parse_gbnf`` reads the syntax the way llama.cpp's parser does (comments,
literals and character classes with the same escapes, groups, ``.``, and the repetitions ``?``
``*`` ``+`` ``{m}`` ``{m,}`` ``{m,n}``, each applying to the item before it: a whole literal, a
class, a rule or a group). Each rule is a tuple of alternatives, each alternative a tuple of
elements: a character class, a rule reference, or a counted repetition of a rule (kept as a
count, where llama.cpp writes n nested rules, so ``jchar{0,2048}`` stays one element). Token
references (``<[id]>``, ``<name>``) are not read: ``GbnfError``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHAR, REF, REP = 0, 1, 2
ANY_CHAR = ((0, 0x10FFFF),)
UNBOUNDED = -1

# (CHAR, ranges: ((lo, hi), ...), negated) | (REF, rule) | (REP, rule, min, max or UNBOUNDED)
Element = tuple[Any, ...]
ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


class GbnfError(ValueError):
    """Grammar text this reader cannot take (llama.cpp may still read it)."""


@dataclass(frozen=True, slots=True)
class Rules:
    """A grammar as flat rules: ``alts[a]`` is alternative ``a`` (a tuple of elements);
    ``of_rule[r]`` the alternatives of rule ``r``; ``root`` the start rule; ``names`` by id."""
    alts: tuple[tuple[Element, ...], ...]
    of_rule: tuple[tuple[int, ...], ...]
    root: int
    names: tuple[str, ...]


def _word(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "-")


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.ids: dict[str, int] = {}
        self.names: list[str] = []
        self.bodies: dict[int, list[tuple[Element, ...]]] = {}

    def symbol(self, name: str) -> int:
        if name not in self.ids:
            self.ids[name] = len(self.names)
            self.names.append(name)
        return self.ids[name]

    def fresh(self, base: str) -> int:
        return self.symbol(f"{base}_{len(self.names)}")

    def at(self, pos: int) -> str:
        return self.text[pos] if pos < len(self.text) else ""

    def space(self, pos: int, newline_ok: bool) -> int:
        t = self.text
        while pos < len(t) and (t[pos] in " \t#" or (newline_ok and t[pos] in "\r\n")):
            if t[pos] == "#":
                while pos < len(t) and t[pos] not in "\r\n":
                    pos += 1
            else:
                pos += 1
        return pos

    def name(self, pos: int) -> tuple[str, int]:
        end = pos
        while end < len(self.text) and _word(self.text[end]):
            end += 1
        if end == pos:
            raise GbnfError(f"expecting a name at {self.text[pos:pos + 20]!r}")
        return self.text[pos:end], end

    def char(self, pos: int) -> tuple[int, int]:
        t = self.text
        if pos >= len(t):
            raise GbnfError("unexpected end of the grammar")
        if t[pos] != "\\":
            return ord(t[pos]), pos + 1
        esc = self.at(pos + 1)
        if esc in HEX_DIGITS:
            n = HEX_DIGITS[esc]
            digits = t[pos + 2:pos + 2 + n]
            try:
                return int(digits, 16), pos + 2 + n
            except ValueError:
                raise GbnfError(f"expecting {n} hex digits at {t[pos:pos + 12]!r}") from None
        if esc in ESCAPES:
            return ord(ESCAPES[esc]), pos + 2
        raise GbnfError(f"unknown escape at {t[pos:pos + 12]!r}")

    def read(self, root: str) -> Rules:
        pos = self.space(0, True)
        while pos < len(self.text):
            name, pos = self.name(pos)
            pos = self.space(pos, False)
            if not self.text.startswith("::=", pos):
                raise GbnfError(f"expecting ::= after {name!r}")
            pos = self.alternates(self.space(pos + 3, True), self.symbol(name), nested=False)
            if self.at(pos) == "\r":
                pos += 2 if self.at(pos + 1) == "\n" else 1
            elif self.at(pos) == "\n":
                pos += 1
            elif pos < len(self.text):
                raise GbnfError(f"expecting the end of a line at {self.text[pos:pos + 20]!r}")
            pos = self.space(pos, True)
        missing = [n for n, i in self.ids.items() if i not in self.bodies]
        if missing:
            raise GbnfError(f"the rule {missing[0]!r} is used but not defined")
        if root not in self.ids:
            raise GbnfError(f"the grammar has no {root!r} rule")
        alts: list[tuple[Element, ...]] = []
        of_rule: list[tuple[int, ...]] = []
        for r in range(len(self.names)):
            first = len(alts)
            alts.extend(self.bodies[r])
            of_rule.append(tuple(range(first, len(alts))))
        return Rules(tuple(alts), tuple(of_rule), self.ids[root], tuple(self.names))

    def alternates(self, pos: int, rule: int, *, nested: bool) -> int:
        seqs = []
        seq, pos = self.sequence(pos, rule, nested)
        seqs.append(seq)
        while self.at(pos) == "|":
            seq, pos = self.sequence(self.space(pos + 1, True), rule, nested)
            seqs.append(seq)
        self.bodies[rule] = seqs
        return pos

    def sequence(self, pos: int, rule: int, nested: bool) -> tuple[tuple[Element, ...], int]:
        items: list[list[Element]] = []
        while pos < len(self.text):
            c = self.text[pos]
            if c == '"':
                pos += 1
                chars: list[Element] = []
                while self.at(pos) != '"':
                    code, pos = self.char(pos)
                    chars.append((CHAR, ((code, code),), False))
                items.append(chars)
                pos = self.space(pos + 1, nested)
            elif c == "[":
                item, pos = self.char_class(pos + 1)
                items.append([item])
                pos = self.space(pos, nested)
            elif c in "<!":
                raise GbnfError("token references (<[id]>, <name>) are not read here")
            elif _word(c):
                name, pos = self.name(pos)
                items.append([(REF, self.symbol(name))])
                pos = self.space(pos, nested)
            elif c == "(":
                sub = self.fresh(self.names[rule])
                pos = self.alternates(self.space(pos + 1, True), sub, nested=True)
                if self.at(pos) != ")":
                    raise GbnfError(f"expecting ')' at {self.text[pos:pos + 20]!r}")
                items.append([(REF, sub)])
                pos = self.space(pos + 1, nested)
            elif c == ".":
                items.append([(CHAR, ANY_CHAR, False)])
                pos = self.space(pos + 1, nested)
            elif c in "*+?{":
                if not items:
                    raise GbnfError(f"a repetition with nothing before it at {self.text[pos:pos + 20]!r}")
                (lo, hi), pos = self.counts(pos)
                items[-1] = [(REP, self.as_rule(items[-1], rule), lo, hi)]
                pos = self.space(pos, nested)
            else:
                break
        return tuple(e for item in items for e in item), pos

    def char_class(self, pos: int) -> tuple[Element, int]:
        negated = self.at(pos) == "^"
        pos += negated
        ranges = []
        while self.at(pos) != "]":
            lo, pos = self.char(pos)
            hi = lo
            if self.at(pos) == "-" and self.at(pos + 1) not in ("]", ""):
                hi, pos = self.char(pos + 1)
            ranges.append((lo, hi))
        return (CHAR, tuple(ranges), negated), pos + 1

    def counts(self, pos: int) -> tuple[tuple[int, int], int]:
        c = self.text[pos]
        if c != "{":
            return {"*": (0, UNBOUNDED), "+": (1, UNBOUNDED), "?": (0, 1)}[c], pos + 1
        pos = self.space(pos + 1, False)
        lo, pos = self.number(pos)
        pos = self.space(pos, False)
        hi = lo
        if self.at(pos) == ",":
            pos = self.space(pos + 1, False)
            hi = UNBOUNDED
            if self.at(pos).isdigit():
                hi, pos = self.number(pos)
                pos = self.space(pos, False)
        if self.at(pos) != "}":
            raise GbnfError(f"expecting '}}' at {self.text[pos:pos + 20]!r}")
        if hi != UNBOUNDED and hi < lo:
            raise GbnfError(f"a repetition of at least {lo} and at most {hi}")
        return (lo, hi), pos + 1

    def number(self, pos: int) -> tuple[int, int]:
        end = pos
        while end < len(self.text) and self.text[end].isascii() and self.text[end].isdigit():
            end += 1
        if end == pos:
            raise GbnfError(f"expecting a number at {self.text[pos:pos + 20]!r}")
        return int(self.text[pos:end]), end

    def as_rule(self, item: list[Element], rule: int) -> int:
        """The rule an item repeats: a rule it names, else one made of it."""
        if len(item) == 1 and item[0][0] == REF:
            return item[0][1]
        sub = self.fresh(self.names[rule])
        self.bodies[sub] = [tuple(item)]
        return sub


def parse_gbnf(text: str, root: str = "root") -> Rules:
    """``text`` as flat rules; GbnfError where it is not GBNF this reader takes."""
    return _Reader(text).read(root)

"""A JSON Schema ``pattern`` as grammar: a regular expression becomes GBNF over a JSON string's text.

Python's own regular-expression parser (``re._parser``) reads the pattern, and its tree is
written as GBNF for the characters *as JSON writes them inside a string*: a quote or a
backslash escaped, a control character as its JSON escape. Character classes follow
ECMA-262 (what JSON Schema's patterns are): ``\\d`` is [0-9], ``\\w`` is ASCII, and ``.``
matches anything but a line break.

JSON Schema patterns are not anchored: ``^`` and ``$`` say where a match must start and end;
without them the match may sit anywhere. The grammar writes the match at the start (or, for a
pattern anchored only at its end, after free text), which every validator accepts. A repeat
without an upper bound gets REPEAT_CAP, so a constrained model cannot write forever.

What a grammar cannot say (look-around, back references, a word boundary, case-insensitive
flags) raises PatternError: the tool's other keywords stay enforced and the validator that
checks every call checks the pattern.
"""
from __future__ import annotations

import re
import re._constants as C
import re._parser as sre

REPEAT_CAP = 256   # extra repeats of an unbounded ``+``, ``*`` or ``{n,}``
FREE_CAP = 256     # free characters around a match that is not anchored
MAX_UNICODE = 0x10FFFF
SHORT_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}

# ECMA-262's classes, as code point ranges.
DIGIT = [(0x30, 0x39)]
WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
SPACE = [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
         (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
LINE_BREAKS = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
CATEGORIES = {C.CATEGORY_DIGIT: (DIGIT, False), C.CATEGORY_NOT_DIGIT: (DIGIT, True),
              C.CATEGORY_WORD: (WORD, False), C.CATEGORY_NOT_WORD: (WORD, True),
              C.CATEGORY_SPACE: (SPACE, False), C.CATEGORY_NOT_SPACE: (SPACE, True)}


class PatternError(ValueError):
    """A regular expression (or part of one) that a grammar cannot express."""


def pattern_rule(pattern: str) -> str:
    """A GBNF expression for the inside of a JSON string that ``pattern`` (JSON Schema's) matches."""
    try:
        parsed = sre.parse(pattern)
    except (re.error, OverflowError, RecursionError) as e:
        raise PatternError(f"the pattern {pattern!r} cannot be read ({e})") from None
    if parsed.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL):
        raise PatternError("flags inside a pattern (such as case-insensitive) cannot be enforced")
    tree = list(parsed)
    start = bool(tree) and tree[0] == (C.AT, C.AT_BEGINNING)
    end = bool(tree) and tree[-1] in ((C.AT, C.AT_END), (C.AT, C.AT_END_STRING))
    body = _seq(tree[1 if start else 0:len(tree) - 1 if end else len(tree)])
    free = f"jchar{{0,{FREE_CAP}}}"
    if start and end:
        return body
    if end:
        return f"{free} {body}".strip()
    return f"{body} {free}".strip()


def _seq(items: list) -> str:
    return " ".join(x for x in (_node(op, av) for op, av in items) if x)


def _node(op, av) -> str:
    if op is C.LITERAL:
        return _char(av)
    if op is C.NOT_LITERAL:
        return _class(_complement([(av, av)]))
    if op is C.ANY:
        return _class(_complement(LINE_BREAKS))
    if op is C.IN:
        return _class(_in(av))
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
        lo, hi, sub = av
        inner = _seq(list(sub))
        if not inner:
            return ""
        top = lo + REPEAT_CAP if hi is C.MAXREPEAT else hi
        if (lo, top) == (1, 1):
            return inner
        return f"({inner}){{{lo},{top}}}"
    if op is C.BRANCH:
        return "(" + " | ".join(_seq(list(b)) or '""' for b in av[1]) + ")"
    if op in (C.SUBPATTERN, C.ATOMIC_GROUP):
        sub = av[-1] if op is C.SUBPATTERN else av
        if op is C.SUBPATTERN and (av[1] or av[2]):
            raise PatternError("flags inside a pattern (such as case-insensitive) cannot be enforced")
        return f"({_seq(list(sub))})"
    if op is C.AT:
        raise PatternError("an anchor or a word boundary inside a pattern cannot be enforced")
    raise PatternError(f"{str(op).lower()} in a pattern cannot be enforced by a grammar")


def _in(items: list) -> list[tuple[int, int]]:
    """A character class's code point ranges (ECMA's meaning for the escapes)."""
    ranges: list[tuple[int, int]] = []
    negate = False
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            ranges.append((av, av))
        elif op is C.RANGE:
            ranges.append(av)
        elif op is C.CATEGORY:
            base, neg = CATEGORIES.get(av, (None, False))
            if base is None:
                raise PatternError(f"the class {av} cannot be enforced")
            ranges.extend(_complement(base) if neg else base)
        else:
            raise PatternError(f"{op} inside a character class cannot be enforced")
    return _complement(ranges) if negate else _merge(ranges)


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, at = [], 0
    for lo, hi in _merge(ranges):
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= MAX_UNICODE:
        out.append((at, MAX_UNICODE))
    return out


def _code(c: int) -> str:
    return f"\\u{c:04X}" if c <= 0xFFFF else f"\\U{c:08X}"


def _escaped(c: int) -> str:
    """How JSON writes a character that it must escape, as a GBNF expression."""
    if c == 0x22:
        return '"\\\\\\""'
    if c == 0x5C:
        return '"\\\\\\\\"'
    if c in SHORT_ESCAPES:
        return f'"\\\\{SHORT_ESCAPES[c]}"'
    hi, lo = divmod(c, 16)
    digit = "0123456789abcdef"[lo]
    last = f"[{digit}{digit.upper()}]" if digit.isalpha() else f'"{digit}"'
    return f'"\\\\u00{hi:x}" {last}'


def _char(c: int) -> str:
    if c < 0x20 or c in (0x22, 0x5C):
        return _escaped(c)
    return f"[{_code(c)}]"


def _class(ranges: list[tuple[int, int]]) -> str:
    """A choice of characters as JSON writes them: one class for those written as themselves, and
    the escape of each one JSON must escape."""
    plain: list[tuple[int, int]] = []
    special: list[int] = []
    for lo, hi in ranges:
        for a, b in _split(lo, hi):
            if a < 0x20 or a in (0x22, 0x5C):
                special.extend(range(a, b + 1))
            else:
                plain.append((a, b))
    if not plain and not special:
        raise PatternError("a character class that matches nothing cannot be enforced")
    alts = []
    if plain:
        alts.append("[" + "".join(_code(a) if a == b else f"{_code(a)}-{_code(b)}" for a, b in plain) + "]")
    alts.extend(_escaped(c) for c in special)
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def _split(lo: int, hi: int) -> list[tuple[int, int]]:
    """``[lo, hi]`` cut around the characters JSON escapes (control characters, quote, backslash)."""
    out, cuts = [], [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
    at = lo
    for a, b in cuts:
        if b < at or a > hi:
            continue
        if a > at:
            out.append((at, a - 1))
        for c in range(max(a, at), min(b, hi) + 1):
            out.append((c, c))
        at = min(b, hi) + 1
    if at <= hi:
        out.append((at, hi))
    return out

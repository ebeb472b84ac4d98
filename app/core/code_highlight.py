"""Syntax colours for code blocks, with Pygments. Qt-free.

``spans`` turns code into (start, end, style) runs over the exact text given:
the lexer is told neither to strip nor to add newlines, so offsets match the
document the code sits in. A fence without a language, or one Pygments does
not know, is shown uncoloured (guessing a language from the text is slow and
often wrong). Nothing here interprets the code; colours are only formats.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.styles import get_style_by_name
from pygments.util import ClassNotFound

STYLES = {"light": "friendly", "dark": "github-dark"}
MAX_CHARS = 200_000  # a block longer than this is left uncoloured: lexing it would stall the window


@dataclass(slots=True, frozen=True)
class Span:
    start: int
    end: int
    color: str | None  # "#rrggbb"
    bold: bool
    italic: bool


@lru_cache(maxsize=64)
def lexer_for(language: str) -> Lexer:
    """The lexer for a fence's language name (plain text when unknown or empty)."""
    name = language.strip().split()[0].lower() if language.strip() else ""
    try:
        return get_lexer_by_name(name, stripnl=False, ensurenl=False) if name else \
            TextLexer(stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def label_for(language: str) -> str:
    """What the block's header says: the language Pygments knows it as, or 'text'."""
    lexer = lexer_for(language)
    return "text" if isinstance(lexer, TextLexer) else str(lexer.name)


def spans(code: str, language: str, scheme: str) -> list[Span]:
    """Coloured runs over ``code`` (adjacent tokens of one style are merged)."""
    out: list[Span] = []
    for _ in spans_stepwise(code, language, scheme, out):
        pass
    return out


def spans_stepwise(code: str, language: str, scheme: str, out: list[Span], step: int = 256) -> Iterator[None]:
    """``spans`` a little at a time: fills ``out``, pausing (yielding) after every ``step`` tokens,
    so a long block can be coloured between other work."""
    lexer = lexer_for(language)
    if isinstance(lexer, TextLexer) or len(code) > MAX_CHARS:
        return
    style = get_style_by_name(STYLES.get(scheme, STYLES["light"]))
    pos = 0
    for n, (ttype, value) in enumerate(lexer.get_tokens(code), 1):
        if n % step == 0:
            yield
        if not value:
            continue
        s = style.style_for_token(ttype)
        color = f"#{s['color']}" if s["color"] else None
        if color is not None or s["bold"] or s["italic"]:
            last = out[-1] if out else None
            if last is not None and last.end == pos and (last.color, last.bold, last.italic) == \
                    (color, s["bold"], s["italic"]):
                out[-1] = Span(last.start, pos + len(value), color, s["bold"], s["italic"])
            else:
                out.append(Span(pos, pos + len(value), color, s["bold"], s["italic"]))
        pos += len(value)


def clip(runs: list[Span], start: int, end: int, ends: list[int] | None = None) -> list[Span]:
    """The runs over ``code[start:end]`` of a ``spans(code, ...)`` list, as offsets into that slice
    (``ends``: each run's end, to find the first one fast)."""
    ends = [s.end for s in runs] if ends is None else ends
    out: list[Span] = []
    for s in runs[bisect_right(ends, start):]:
        if s.start >= end:
            break
        out.append(Span(max(s.start, start) - start, min(s.end, end) - start, s.color, s.bold, s.italic))
    return out

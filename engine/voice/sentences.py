"""A reply's text, as it streams, turned into sentences a voice can read.

Read-aloud starts with the first complete sentence, so sentences are cut as
soon as they end: at ``.``, ``!``, ``?`` or ``;`` followed by a space (a
decimal point or "e.g." is not an end), at Chinese ``。！？；`` at once, and
at a line's end (a heading or a list item is read as one sentence). What a
listener does not want read is dropped: fenced code blocks (the voice says
"Code block." once instead), Markdown marks (``#``, ``*``, ``_``, ``~``,
``>``, list bullets, table pipes), a link's address (its words are kept) and
bare URLs. The caller feeds only the reply's text, never its reasoning.
"""
from __future__ import annotations

import re

CODE_SAID = "Code block."
_FENCE = re.compile(r"^\s*(```|~~~)")
_ENDS = re.compile(r"[.!?;](?=[\s\"')\]]|$)|[。！？；]")
_ABBREV = re.compile(r"(?:\b(?:e\.g|i\.e|etc|vs|Mr|Mrs|Ms|Dr|St|No|Fig)|\b[A-Z])\.$")
_ENDS_OR_CLAUSE = re.compile(_ENDS.pattern + r"|[,:](?=\s)|[，：、]|\s[–—-](?=\s)")
FIRST_CLAUSE_WORDS = 6   # a reply's first piece may end at a comma once it has this many words
_LIST_NUMBER = re.compile(r"\s*\d+\.")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_URL = re.compile(r"<?https?://\S+>?")
_BULLET = re.compile(r"^\s*(?:[-*+]\s+|\d+[.)]\s+|>+\s?|#{1,6}\s+)+")
_MARKS = re.compile(r"(\*\*|__|\*|~~|`|(?<!\w)_|_(?!\w))")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")


def _words(text: str) -> int:
    """Words, as a voice's time goes: Latin words, and Chinese characters two to a word."""
    return len(re.findall(r"[A-Za-z0-9']+", text)) + len(re.findall(r"[\u3400-\u9fff]", text)) // 2


def speakable(line: str) -> str:
    """One line of Markdown as words: marks, link addresses and URLs gone."""
    if _TABLE_RULE.match(line):
        return ""
    line = _IMAGE.sub(lambda m: m.group(1), line)
    line = _LINK.sub(lambda m: m.group(1), line)
    line = _URL.sub("", line)
    line = _BULLET.sub("", line)
    line = _MARKS.sub("", line)
    line = re.sub(r"\s*\|\s*", ", ", line).strip(" ,")
    return re.sub(r"\s+", " ", line).strip()


class SentenceCutter:
    """Reply text in, delta by delta; whole sentences out, ready for a voice.

    The very first piece may end at a clause (a comma, a colon, a dash) once it
    has ``first_clause_words`` words: a long first sentence would otherwise
    hold back the first audio until all of it is spoken."""

    def __init__(self, *, first_clause_words: int = FIRST_CLAUSE_WORDS) -> None:
        self._line = ""          # the current line, not yet ended
        self._spoken = 0         # characters of the current line already given out
        self._in_code = False
        self._given = 0          # pieces given out so far
        self.first_clause_words = first_clause_words

    def feed(self, delta: str) -> list[str]:
        out: list[str] = []
        *done, rest = (self._line + delta).split("\n")
        for line in done:
            out += self._end_line(line)
            self._spoken = 0
        self._line = rest
        if not self._in_code and not _FENCE.match(self._line):
            out += self._sentences(final=False)
        return out

    def finish(self) -> list[str]:
        """The reply ended: whatever is left."""
        out = self._end_line(self._line) if self._line else []
        self._line, self._spoken = "", 0
        return out

    def _end_line(self, line: str) -> list[str]:
        if _FENCE.match(line):
            self._in_code = not self._in_code
            return [CODE_SAID] if self._in_code else []
        if self._in_code:
            return []
        self._line = line
        out = self._sentences(final=True)
        self._line = ""
        return out

    def _sentences(self, *, final: bool) -> list[str]:
        out = []
        rest = self._line[self._spoken:]
        start = 0
        for m in (_ENDS_OR_CLAUSE if self._given == 0 and self.first_clause_words else _ENDS).finditer(rest):
            piece = rest[start:m.end()]
            at_line_start = start == self._spoken == 0
            if m.group() == "." and (_ABBREV.search(piece) or (at_line_start and _LIST_NUMBER.fullmatch(piece))):
                continue
            if not _ENDS.fullmatch(m.group()) and (self._given or _words(piece) < self.first_clause_words):
                continue  # a clause ends only a long first piece
            if not final and m.end() == len(rest) and m.group() in ".!?;":
                break  # "3." may go on as "3.5": wait for what follows
            said = speakable(piece)
            if said and any(c.isalnum() for c in said):
                out.append(said)
                self._given += 1
            start = m.end()
        self._spoken += start
        if final:
            said = speakable(rest[start:])
            if said and any(c.isalnum() for c in said):
                out.append(said)
                self._given += 1
        return out


def speakable_sentences(text: str) -> list[str]:
    """A whole reply's sentences (the Speak button on a finished reply)."""
    cutter = SentenceCutter()
    return cutter.feed(text) + cutter.finish()

"""Where a streaming reply's Markdown can be cut into pieces, found incrementally. Qt-free.

The reply view shows a reply as a column of pieces and renders each finished
piece once (app.chat.message_widget). ``Segmenter`` is fed the reply as it
streams and reads each line once, so what a render costs never grows with the
reply's length. A piece ends:

- before a line that opens a new top-level block: the line before it is blank,
  no code fence is open, and the line is not indented (a list item's
  continuation stays with its item); or
- inside a long code block whose fence starts the line (not one nested in a
  list item): before a code line that is not the closing fence. The next piece
  reopens the block with the same fence line (``Cut.fence_line``), so each
  piece is valid Markdown on its own and a long open block is never parsed or
  highlighted again once a piece of it is done.

Every piece is at least ``min_chars`` long. A cut is decided only from what
no later text can change (the lines before it, and the first character of the
line after a cut between blocks; a cut in a code block waits for its line to
end, except in ``finish``), so feeding the text in any deltas gives the cuts a
whole text gives. Lines end at
"\\n", "\\r\\n" or "\\r", as in Qt's Markdown reader. The code blocks are kept
too: the same list ``text_utils.code_blocks`` finds in the whole text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)")
_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
_EOL = re.compile(r"\r\n|\r|\n")


def opens(line: str) -> str | None:
    """The fence (its run of ``` or ~~~) when ``line`` opens a fenced code block, as CommonMark reads it."""
    m = _OPEN.match(line)
    if m is None or (m.group(1)[0] == "`" and "`" in m.group(2)):
        return None  # a backtick fence's info string has no backtick: that line is inline code
    return m.group(1)


def closes(fence: str, line: str) -> bool:
    """Whether ``line`` closes a block opened with ``fence`` (at most 3 spaces in, as long or longer)."""
    m = _CLOSE.match(line)
    return m is not None and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)


@dataclass(slots=True)
class CodeBlock:
    fence: str          # the opening fence's run of ``` or ~~~
    fence_line: str     # the opening line, without its line end
    lines: list[str] = field(default_factory=list)  # the code, line by line
    closed: bool = False
    cut: bool = False   # a piece ends inside it

    @property
    def code(self) -> str:
        return "\n".join(self.lines)


@dataclass(slots=True, frozen=True)
class Cut:
    pos: int                  # the new piece starts here
    block: int | None = None  # the code block the cut falls in (None: between blocks)
    code_at: int = 0          # where in that block's ``code`` the new piece's part begins
    fence_line: str = ""      # that block's opening line: the new piece starts with it


class Segmenter:
    """Feed a reply's text as it comes (``feed``), then ``finish`` once it is final."""

    def __init__(self, min_chars: int, code_chars: int | None = None) -> None:
        self.min_chars = min_chars
        self.code_chars = code_chars  # None: never cut inside a code block
        self.blocks: list[CodeBlock] = []
        self.closed: list[int] = []   # blocks closed since the caller last emptied this
        self.fed = 0                  # characters fed so far
        self._pending = ""            # the trailing partial line
        self._line_at = 0             # where the pending line starts
        self._piece_at = 0            # where the current piece starts
        self._open: CodeBlock | None = None
        self._code_len = 0            # the open block's code length so far ("\n"-joined)
        self._in_piece = 0            # the open block's lines in the current piece
        self._prev_blank = False
        self._done = False

    def feed(self, text: str) -> list[Cut]:
        """Read ``text`` (what follows what was fed); the cuts its complete lines settle."""
        if self._done:
            raise ValueError("this text was already finished")
        cuts: list[Cut] = []
        look = max(0, len(self._pending) - 1)  # a "\r" at the end may be half of "\r\n"
        buf = self._pending + text
        self.fed += len(text)
        start = 0
        for m in _EOL.finditer(buf, look):
            if m.group() == "\r" and m.end() == len(buf):
                break  # wait for the next character
            self._line(buf[start:m.start()], cuts, final=False)
            self._line_at += m.end() - start
            start = m.end()
        self._pending = buf[start:]
        p = self._pending
        if p and self._open is None and self._prev_blank and not p[0].isspace() \
                and self._line_at - self._piece_at >= self.min_chars:
            # A cut between blocks depends on the line's first character only: cut now, so the live
            # piece does not carry a finished paragraph until its new one is done.
            cuts.append(Cut(self._line_at))
            self._piece_at = self._line_at
        return cuts

    def finish(self) -> list[Cut]:
        """The text is complete: its last line (without a line end) counts too. Nothing more may be fed."""
        cuts: list[Cut] = []
        if not self._done and self._pending:
            if self._pending.endswith("\r"):  # it did end its line
                self._line(self._pending[:-1], cuts, final=False)
            else:
                self._line(self._pending, cuts, final=True)
            self._pending = ""
        self._done = True
        return cuts

    def _line(self, line: str, cuts: list[Cut], *, final: bool) -> None:
        pos = self._line_at
        stripped = line.strip()
        block = self._open
        if block is None:
            if self._prev_blank and stripped and not line[0].isspace() and pos - self._piece_at >= self.min_chars:
                cuts.append(Cut(pos))
                self._piece_at = pos
        elif (self.code_chars is not None and not final and self._in_piece and block.fence_line[0] in "`~"
              and not closes(block.fence, line) and pos - self._piece_at >= self.code_chars):
            # A partial last line could still turn out to be the closing fence: the final text never cuts there.
            block.cut = True
            cuts.append(Cut(pos, len(self.blocks) - 1, self._code_len + 1, block.fence_line))
            self._piece_at, self._in_piece = pos, 0
        if block is None:
            fence = opens(line)
            if fence is not None:
                self._open = CodeBlock(fence, line)
                self.blocks.append(self._open)
                self._code_len = -1  # no line yet: the first adds no "\n"
        elif closes(block.fence, line):
            block.closed = True
            self.closed.append(len(self.blocks) - 1)
            self._open = None
        else:
            block.lines.append(line)
            self._code_len += len(line) + 1
            self._in_piece += 1
        self._prev_blank = not stripped

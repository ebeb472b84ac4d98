"""A reply's text as a column of views, one per piece (app.core.md_segments).

Re-parsing a whole reply on every render made long replies stall the window, so
a finished piece is rendered once and left alone; only the last one, the live
piece, is rendered again as text comes. ``append`` takes only what is new: it
reads each new line once, so a render costs the same at the end of a long reply
(or of a long open code block, which is cut in pieces too) as at its start.

``show_text`` renders a given text from scratch, keeping the views whose piece is
unchanged; it is what a reply that does not stream gets, so the pieces, and
each view's document, are the same whichever way the text came. A code block
cut in pieces is coloured piece by piece while it streams; once it is closed
(or the reply is over) each piece gets the colours of the whole block, as one
view showing it all would have, and only a piece whose colours change is
rendered again. While the reply streams, the whole block is lexed a little at a
time between events (COLOUR_MS at a go), so closing a long block costs no
render more than any other; a final text is coloured at once.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.chat.text_view import GAP, AutoHeightBrowser
from app.core.code_highlight import Span, clip, spans_stepwise
from app.core.md_segments import Cut, Segmenter

SEGMENT_CHARS = 1500  # a finished piece of a reply this long is rendered once, then left alone
PLACEHOLDER = "…"     # what an empty live piece shows while the reply streams
COLOUR_MS = 4         # how long one go at lexing a whole cut block may take

Key = tuple[str, str, str]  # a whole block's code, language, colour scheme


class PieceView(AutoHeightBrowser):
    """The view of one piece: where the piece starts, and where it ends once it is finished."""

    def __init__(self, start: Cut, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.start = start
        self.end: Cut | None = None  # None: the live piece
        self.continued = start.block is not None


class ReplyPieces(QWidget):
    code_copied = Signal(str)   # a Copy link was clicked: its block's code
    link_refused = Signal(str)  # why a clicked link was not opened

    def __init__(self, colors: dict[str, str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.colors = colors
        self._lay = QVBoxLayout(self)
        self._lay.setContentsMargins(0, 0, 0, 0)
        self._lay.setSpacing(0)  # the views' own margins space them, so a cut code block shows no seam
        self.segments: list[PieceView] = []
        self._scan = Segmenter(SEGMENT_CHARS, SEGMENT_CHARS)
        self._tail = ""             # the live piece's text
        self._final = False
        self._block_views: dict[int, list[PieceView]] = {}  # each cut block's finished views
        self._whole: dict[Key, tuple[list[Span], list[int]]] = {}  # whole blocks' colours
        self._jobs: dict[Key, tuple[int, list[Span], Iterator[None]]] = {}  # whole blocks being lexed
        self._job_timer = QTimer(self)
        self._job_timer.setSingleShot(True)
        self._job_timer.setInterval(0)
        self._job_timer.timeout.connect(self._work)
        self._add(Cut(0))

    def rendered_text(self) -> str:
        return "\n".join(seg.toPlainText() for seg in self.segments)

    def has_code(self) -> bool:
        return bool(self._scan.blocks)

    def can_append(self) -> bool:
        return not self._final

    def set_colors(self, colors: dict[str, str]) -> None:
        self.colors = colors
        for seg in self.segments:
            seg.colors = colors

    # -- rendering ----------------------------------------------------------

    def append(self, new: str, *, streaming: bool) -> None:
        """Show ``new`` after what is shown (the text is not final yet)."""
        cuts = self._scan.feed(new)
        self._tail += new
        self._advance(cuts, streaming)

    def show_text(self, text: str, *, final: bool, rebuild: bool = False) -> None:
        """Show ``text`` as if it came at once; the views whose piece is unchanged are kept."""
        if rebuild:
            self._whole.clear()
        self._scan = Segmenter(SEGMENT_CHARS, SEGMENT_CHARS)
        self._final = final
        self._jobs.clear()  # block numbers may mean other blocks now; what is needed starts again
        cuts = [Cut(0), *self._scan.feed(text), *(self._scan.finish() if final else [])]
        self._scan.closed.clear()
        keep = 0
        while not rebuild and keep < min(len(cuts) - 1, len(self.segments)):
            seg, nxt = self.segments[keep], cuts[keep + 1]
            if (seg.start != cuts[keep] or seg.end not in (None, nxt) or seg.open_end != (nxt.block is not None)
                    or seg.markdown != _markdown(cuts[keep], text[cuts[keep].pos:nxt.pos])):
                break
            keep += 1
        # The view after the kept ones becomes the live one if it starts where the live piece does.
        reuse = keep + 1 if keep < len(self.segments) and self.segments[keep].start == cuts[keep] else max(keep, 1)
        for seg in self.segments[reuse:]:
            self._lay.removeWidget(seg)
            seg.hide()  # at once: it is deleted when the event loop next gets to it
            seg.deleteLater()
        del self.segments[reuse:]
        self._block_views = {}
        for seg, nxt in zip(self.segments[:keep], cuts[1:]):
            self._finished(seg, nxt)
            self._recolour(seg)
        if reuse == keep + 1:
            live = self.segments[keep]
            live.end, live.open_end = None, False
        else:
            self._add(cuts[keep])
        self._tail = text[cuts[keep].pos:]
        self._advance(cuts[keep + 1:], not final)

    def _advance(self, cuts: list[Cut], streaming: bool) -> None:
        closed, self._scan.closed = self._scan.closed, []
        for cut in cuts:  # the live piece is finished: render it a last time, then start the next
            seg = self.segments[-1]
            piece, self._tail = self._tail[:cut.pos - seg.start.pos], self._tail[cut.pos - seg.start.pos:]
            self._finished(seg, cut)
            seg.set_markdown(_markdown(seg.start, piece))
            self._add(cut)
        for b in closed:  # a cut block is complete: its finished pieces take the whole block's colours
            for seg in self._block_views.get(b, []):
                self._recolour(seg)
        live = self.segments[-1]
        live.set_markdown(_markdown(live.start, self._tail if self._tail or not streaming else PLACEHOLDER))

    def _finished(self, seg: PieceView, end: Cut) -> None:
        seg.end, seg.open_end = end, end.block is not None
        for b in {seg.start.block, end.block}:
            if b is not None:
                self._block_views.setdefault(b, []).append(seg)

    def _recolour(self, seg: PieceView) -> None:
        """Render ``seg`` again if the colours its cut blocks get now are not the ones it shows."""
        n = len(seg.codes)
        for i in sorted({0, n - 1}) if n else ():
            given = self._spans_for(seg, i, n, seg.codes[i], seg.languages[i])
            if given is not None and given != seg.used_spans[i]:
                seg.set_markdown(seg.markdown)
                return

    def _add(self, start: Cut) -> PieceView:
        seg = PieceView(start, self)
        seg.colors = self.colors
        if self.segments and not seg.continued:
            seg.set_gap(GAP)  # (the views of a cut code block meet without one)
        seg.code_copied.connect(self.code_copied)
        seg.link_refused.connect(self.link_refused)
        seg.spans_for = lambda i, n, code, language, seg=seg: self._spans_for(seg, i, n, code, language)
        seg.whole_code = lambda i, seg=seg: self._whole_code(seg, i)
        self._lay.addWidget(seg)
        self.segments.append(seg)
        return seg

    # -- cut code blocks ----------------------------------------------------

    def _part(self, seg: PieceView, i: int, n: int, code: str) -> tuple[str, int] | None:
        """(the whole block, where this piece of it starts) when code group ``i`` of ``n`` in ``seg``
        is a piece of a block cut across views; None when it is a block of its own."""
        if i == 0 and seg.start.block is not None:
            b, at = seg.start.block, seg.start.code_at
        elif i == n - 1 and seg.end is not None and seg.end.block is not None:
            b, at = seg.end.block, 0
        else:
            return None
        whole = self._scan.blocks[b].code
        if whole[at:at + len(code)] != code:
            return None  # Qt read this piece differently from the segmenter: it stands alone
        return whole, at

    def _spans_for(self, seg: PieceView, i: int, n: int, code: str, language: str) -> list[Span] | None:
        b = seg.start.block if i == 0 and seg.start.block is not None else seg.end.block if seg.end else None
        if b is None or not (self._scan.blocks[b].closed or self._final):
            return None  # a block still being written: each piece is coloured on its own for now
        part = self._part(seg, i, n, code)
        if part is None:
            return None
        whole, at = part
        key = (whole, language, self.colors.get("scheme", "light"))
        if key not in self._whole:
            if not self._final:
                self._start(key, b)
                return None  # lexed between events; the pieces are coloured again when it is done
            runs: list[Span] = []
            for _ in spans_stepwise(whole, language, key[2], runs):
                pass
            self._done(key, runs)
        runs, ends = self._whole[key]
        return clip(runs, at, at + len(code), ends)

    def _start(self, key: Key, block: int) -> None:
        if key not in self._jobs:
            runs: list[Span] = []
            self._jobs[key] = (block, runs, spans_stepwise(key[0], key[1], key[2], runs))
            self._job_timer.start()

    def _done(self, key: Key, runs: list[Span]) -> None:
        if len(self._whole) >= 16:
            self._whole.clear()
        self._whole[key] = (runs, [s.end for s in runs])

    def _work(self) -> None:
        """Lex a whole cut block for a moment; when it is done, colour its pieces from it."""
        if not self._jobs:
            return
        key = next(iter(self._jobs))
        block, runs, steps = self._jobs[key]
        until = time.perf_counter() + COLOUR_MS / 1000
        for _ in steps:
            if time.perf_counter() >= until:
                self._job_timer.start()
                return
        del self._jobs[key]
        self._done(key, runs)
        for seg in [*self._block_views.get(block, []), self.segments[-1]]:
            self._recolour(seg)
        if self._jobs:
            self._job_timer.start()

    def _whole_code(self, seg: PieceView, i: int) -> str | None:
        part = self._part(seg, i, len(seg.codes), seg.codes[i])
        return part[0] if part is not None else None


def _markdown(start: Cut, piece: str) -> str:
    """What a piece's view renders: a piece that goes on with a code block reopens it first."""
    return (start.fence_line + "\n" if start.block is not None else "") + piece

"""A streaming reply ends up exactly as the same text rendered at once, piece for piece and format
for format, while each render reads only what is new (app.chat.reply_pieces, app.core.md_segments)."""
from __future__ import annotations

import random

import pytest
from PySide6.QtGui import QBrush, QColor, QFont, QPen, QTextCharFormat, QTextCursor, QTextDocument, QTextLength

from app.chat import message_widget
from app.chat.markdown_render import COPY_SCHEME, code_groups
from app.chat.message_widget import RENDER_MS, RENDER_SHARE, SEGMENT_CHARS, MessageWidget
from app.chat.reply_pieces import PieceView
from app.core.md_segments import Segmenter
from app.core.text_utils import code_blocks, segment_bounds
from app.ui.theme import BUBBLES
from tests.test_app_safe_links import _click_link, _fragments

DOCSTRING = 'def documented():\n    """A docstring long enough\n' + "".join(
    f"    to run across a cut, line {i}, with words in it\n" for i in range(60)) + '    """\n    return 1\n'


def _code(lang: str, lines: int) -> str:
    if lang == "python":
        return "".join(f"def f{i}(a, b):\n    return a + b * {i}  # note {i}\n" for i in range(lines // 2))
    if lang == "rust":
        return "".join(f"fn g{i}(x: u32) -> u32 {{ x * {i} }} // r{i}\n" for i in range(lines))
    return "".join(f"plain line {i} of text\n" for i in range(lines))


def long_reply(*, open_end: bool) -> str:
    parts = [
        "## A long answer\n\nSome **bold**, *italic* and `inline code`, with a [link](https://example.com/a).\r\n",
        "A second line of that paragraph, ending the Windows way.\r\n\r\n",
        "| Name | Size | Note |\n|------|-----:|------|\n" + "".join(
            f"| row {i} | {i * 7} | *n{i}* `c` |\n" for i in range(25)) + "\n",
        "- item one\n  - nested with `code`\n    - deeper [x](https://example.com/x)\n- item two\n\n"
        "1. first\n2. second\n   continued\n3. third\n\n",
        "```python\n" + DOCSTRING + _code("python", 120) + "```\n\n",
        "### Short blocks\n\n```js\nconsole.log('a');\n```\n\n~~~\nno language\n~~~\n\n",
    ]
    for i in range(12):
        parts.append(f"Paragraph {i}: " + "words and more words, " * 15 + f"`x{i}` and **y{i}**.\n\n")
        if i % 4 == 1:
            parts.append("```rust\n" + _code("rust", 6) + "```\n\n")
    parts.append("> a quote\n> on two lines\n\nText before a fence without a blank line:\n```rust\n"
                 + _code("rust", 90) + "```\nRight after the fence.\n\n")
    parts.append("### The end\n\n```python\n" + _code("python", 160 if open_end else 40))
    if not open_end:
        parts.append("```\n\nLast words, no line end")
    return "".join(parts)


def uneven(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.choice((1, 1, 2, 3, 5, 8, 13, 40, 300)) if rng.random() > 0.02 else 2500
        out.append(text[i:i + n])
        i += n
    return out


def _stream(qtbot, deltas: list[str], final: str, seed: int) -> MessageWidget:
    """Through the widget as the window drives it: the stream's list grows, ``grew`` says so and the
    render timer fires (here called at random moments, so renders see uneven amounts of new text)."""
    rng = random.Random(seed)
    w = MessageWidget(1, "assistant", "", colors=BUBBLES["light"])
    qtbot.addWidget(w)
    w.resize(700, 500)
    live: list[str] = []
    w.follow(live)
    w.set_streaming(True)
    read: list[str] = []  # what each render took from the stream
    append = w.pieces.append
    w.pieces.append = lambda new, **kw: (read.append(new), append(new, **kw))[-1]
    for d in deltas:
        live.append(d)
        w.grew()
        if rng.random() < 0.3:
            w._render_timer.stop()
            w._render()
    w._render()  # the timer's last render
    assert "".join(read) == "".join(deltas) == final  # each render read only the new text, once
    assert len(read) > len(deltas) // 5
    del w.pieces.append
    w.set_result(final, complete=True, finish_reason="eos")
    return w


def _fresh(qtbot, text: str) -> MessageWidget:
    w = MessageWidget(2, "assistant", text, colors=BUBBLES["light"])
    qtbot.addWidget(w)
    w.resize(700, 500)
    return w


def _value(v):
    if isinstance(v, QBrush):
        return ("brush", int(v.style().value), v.color().name(QColor.NameFormat.HexArgb))
    if isinstance(v, QColor):
        return ("color", v.name(QColor.NameFormat.HexArgb))
    if isinstance(v, QPen):
        return ("pen", v.widthF(), v.color().name(QColor.NameFormat.HexArgb))
    if isinstance(v, QTextLength):
        return ("length", int(v.type().value), v.rawValue())
    if isinstance(v, QFont):
        return ("font", v.toString())
    if isinstance(v, (list, tuple)):
        return tuple(_value(x) for x in v)
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return (type(v).__name__, str(v))


def _format(fmt, token: str):
    """The format itself (Qt compares formats by all their properties), with the view's token taken out."""
    if fmt.isCharFormat():
        fmt = QTextCharFormat(fmt.toCharFormat())
        if fmt.isAnchor():
            fmt.setAnchorHref(fmt.anchorHref().replace(token, "TOKEN"))
    return fmt


def dump(view) -> list:
    """Everything a view's document shows: its frame, and each block with its format and its
    fragments' text and character formats (the Copy links' per-view token left out)."""
    doc: QTextDocument = view.document()
    token = view._token
    out: list = [("text", doc.toPlainText()), ("root", doc.rootFrame().frameFormat())]
    block = doc.begin()
    while block.isValid():
        table = QTextCursor(block).currentTable()
        out.append(("block", block.text(), block.blockFormat(), _format(block.charFormat(), token),
                    table.format() if table is not None else None))
        it = block.begin()
        while not it.atEnd():
            f = it.fragment()
            cf = f.charFormat()
            out.append(("frag", f.text(), cf.fontWeight(), cf.fontItalic(), cf.fontFamilies(), cf.fontFixedPitch(),
                        _value(cf.foreground()), _value(cf.background()), cf.anchorHref().replace(token, "TOKEN"),
                        _format(cf, token)))
            it += 1
        block = block.next()
    return out


@pytest.mark.parametrize("open_end", [False, True])
def test_a_streamed_reply_is_exactly_the_reply_rendered_at_once(qtbot, open_end):
    text = long_reply(open_end=open_end)
    streamed = _stream(qtbot, uneven(text, seed=7), text, seed=3)
    fresh = _fresh(qtbot, text)
    assert len(streamed.segments) == len(fresh.segments) > 10
    assert any(seg.continued for seg in fresh.segments)  # long code blocks were cut in pieces
    for a, b in zip(streamed.segments, fresh.segments, strict=True):
        assert a.toPlainText() == b.toPlainText()
        assert dump(a) == dump(b)
    assert streamed.rendered_text() == fresh.rendered_text()
    assert streamed.btn_code.isVisibleTo(streamed) and fresh.btn_code.isVisibleTo(fresh)


def test_the_pieces_after_streaming_are_the_pieces_of_a_full_render(qtbot):
    text = long_reply(open_end=False)
    streamed = _stream(qtbot, uneven(text, seed=11), text, seed=5)
    fresh = _fresh(qtbot, text)

    def shape(w):
        return [(s.start, s.end, s.markdown, s.continued, s.open_end) for s in w.segments if isinstance(s, PieceView)]

    assert shape(streamed) == shape(fresh)
    segs = fresh.segments
    # The pieces put back together are the reply (a piece that goes on with a block reopens it first).
    pieces = [s.markdown[len(s.start.fence_line) + 1:] if s.continued else s.markdown for s in segs]
    assert "".join(pieces) == text
    assert [s.start.pos for s in segs[1:]] == [s.end.pos for s in segs[:-1]]
    assert all(s.end is None for s in segs[-1:]) and all(len(p) >= SEGMENT_CHARS for p in pieces[:-1])
    for upper, lower in zip(segs, segs[1:]):
        assert upper.open_end == lower.continued  # a cut block: no margin between its two views


def _colours(view):
    out = []
    for group in code_groups(view.document()):
        for block in group:
            it = block.begin()
            while not it.atEnd():
                f = it.fragment()
                out += [(_value(f.charFormat().foreground()), f.charFormat().fontWeight())] * f.length()
                it += 1
    return out


def _colour_at(view, needle):
    plain = view.document().toPlainText()
    cursor = QTextCursor(view.document())
    cursor.setPosition(plain.index(needle) + 1)
    return _value(cursor.charFormat().foreground())


def _one_view(qtbot, markdown: str):
    view = message_widget.AutoHeightBrowser()
    qtbot.addWidget(view)
    view.colors = BUBBLES["light"]
    view.set_markdown(markdown)
    return view


CUT_CODE = DOCSTRING + _code("python", 100)
NEEDLE = "line 59, with"  # deep in the docstring, in a piece after the first


def test_a_block_cut_in_pieces_is_coloured_as_one_block(qtbot):
    """Each character of a long block shown in pieces has the colours the block has in one view."""
    text = "Intro.\n\n```python\n" + CUT_CODE + "```\n\nAfter.\n"
    w = _stream(qtbot, uneven(text, seed=2), text, seed=9)
    pieces = [s for s in w.segments if code_groups(s.document())]
    assert len(pieces) > 2 and pieces[1].continued
    whole = _one_view(qtbot, "```python\n" + CUT_CODE + "```\n")
    assert sum((_colours(p) for p in pieces), []) == _colours(whole)
    # The docstring keeps the string colour in the pieces after the first, where lexed alone it reads as code.
    later = next(p for p in pieces[1:] if NEEDLE in p.document().toPlainText())
    assert _colour_at(later, NEEDLE) == _colour_at(whole, NEEDLE) != _colour_at(whole, "return a + b")


def test_a_block_closed_while_streaming_is_recoloured_between_events(qtbot):
    text = "Intro.\n\n```python\n" + CUT_CODE + "```\n\nAfter"
    w = MessageWidget(1, "assistant", "", colors=BUBBLES["light"])
    qtbot.addWidget(w)
    live: list[str] = []
    w.follow(live)
    w.set_streaming(True)
    for i in range(0, len(text), 97):
        live.append(text[i:i + 97])
        w._render()
    pieces = [s for s in w.segments if code_groups(s.document())]
    later = next(p for p in pieces[1:] if NEEDLE in p.document().toPlainText())
    whole = _one_view(qtbot, "```python\n" + CUT_CODE + "```\n")
    assert w.pieces._jobs  # the closed block is being lexed whole, between events ...
    assert _colour_at(later, NEEDLE) != _colour_at(whole, NEEDLE)  # ... its pieces coloured alone till then
    qtbot.waitUntil(lambda: not w.pieces._jobs, timeout=20_000)
    assert w.streaming and sum((_colours(p) for p in pieces), []) == _colours(whole)
    assert _colour_at(later, NEEDLE) == _colour_at(whole, NEEDLE)


def test_copy_gives_the_whole_cut_block(qtbot):
    code = _code("python", 200)
    text = "```python\n" + code + "```\n"
    w = _fresh(qtbot, text)
    w.show()
    qtbot.waitExposed(w)
    assert len(w.segments) > 2
    copied: list[str] = []
    w.copy_requested.connect(copied.append)
    first = w.segments[0]
    href = next(f.charFormat().anchorHref() for f in _fragments(first.document()) if f.charFormat().anchorHref())
    assert href.startswith(COPY_SCHEME + ":")
    assert _click_link(qtbot, first, href) == []
    assert copied == [code.rstrip("\n")]
    # No second header (and no second Copy link) where the block goes on.
    assert not any(f.charFormat().anchorHref() for s in w.segments[1:] for f in _fragments(s.document()))
    middle = w.segments[1]
    rect = middle.cursorRect(QTextCursor(middle.document()))
    assert middle.code_at(rect.center()) == code.rstrip("\n")


def test_the_incremental_code_blocks_and_cuts_are_those_of_the_whole_text():
    for open_end in (False, True):
        text = long_reply(open_end=open_end) + "\r\n```\nx\r\n``` \r\n\r\n~~~~\ny\n~~~\n"
        for seed in range(5):
            seg = Segmenter(SEGMENT_CHARS, SEGMENT_CHARS)
            cuts = []
            for d in uneven(text, seed):
                cuts += seg.feed(d)
            cuts += seg.finish()
            whole = Segmenter(SEGMENT_CHARS, SEGMENT_CHARS)
            assert cuts == whole.feed(text) + whole.finish()
            assert [b.code for b in seg.blocks] == code_blocks(text)
            assert any(c.block is not None for c in cuts)
    # Split between "\r" and "\n", the line end still counts once.
    seg = Segmenter(1)
    for d in ("```\r", "\na\r", "\n\r", "\n```\r", "\n"):
        seg.feed(d)
    seg.finish()
    assert [b.code for b in seg.blocks] == code_blocks("```\r\na\r\n\r\n```\r\n") == ["a\n"]
    # Without code cuts (what segment_bounds gives) no piece ends inside a block.
    text = long_reply(open_end=False)
    cuts = segment_bounds(text, 0, SEGMENT_CHARS)
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    assert all(code_blocks(p) for p in pieces if "```" in p)
    assert not any(text[c].isspace() for c in cuts)


def test_a_costly_render_spaces_out_the_next(qtbot, monkeypatch):
    w = MessageWidget(1, "assistant", "", colors=BUBBLES["light"])
    qtbot.addWidget(w)
    live: list[str] = []
    w.follow(live)
    w.set_streaming(True)
    assert w.render_ms == RENDER_MS == w._render_timer.interval()
    clock = iter(range(0, 10_000, 100))  # each render seems to take 100 ms
    monkeypatch.setattr(message_widget.time, "perf_counter", lambda: next(clock) / 1000)
    live.append("Hello")
    w._render()
    assert w.render_ms == RENDER_SHARE * 100 == w._render_timer.interval()
    assert w.rendered_text() == "Hello"


def test_the_segmenter_reads_fences_as_qt_does(qapp):
    """The blocks the segmenter finds are the fenced blocks Qt's Markdown reader makes."""
    from app.ui.safe_links import MARKDOWN

    text = ("```foo`bar\nnot code: a backtick in a backtick fence's info\n\n"
            "~~~ tilde info with ` backtick\ncode\n    ~~~\nstill code (4 spaces in)\n  ~~~~  \nbetween\n"
            "````\nlong fence\n```\nstill code\n````\nbetween\n```\nunclosed\n\nto the end")
    doc = QTextDocument()
    doc.setMarkdown(text, MARKDOWN)
    qt_blocks = ["\n".join(b.text() for b in g) for g in code_groups(doc)]
    assert code_blocks(text) == qt_blocks == [
        "code\n    ~~~\nstill code (4 spaces in)", "long fence\n```\nstill code", "unclosed\n\nto the end"]
    seg = Segmenter(1)
    for ch in text:
        seg.feed(ch)
    seg.finish()
    assert [b.code for b in seg.blocks] == qt_blocks


def test_redrawn_recoloured_or_corrected_mid_stream_it_still_ends_as_a_full_render(qtbot):
    """The window redraws a chat from the store (whose text lags the stream) and follows the stream
    again; the theme changes mid-stream; the final text is not quite what streamed."""
    text = long_reply(open_end=True)
    deltas = uneven(text, seed=4)
    third = len(deltas) // 3
    lagging = "".join(deltas[:third - 20])  # what the store had saved
    w = MessageWidget(1, "assistant", lagging, colors=BUBBLES["light"])  # drawn from the store
    qtbot.addWidget(w)
    live = deltas[:third]
    w.follow(live)
    w.set_streaming(True)
    for k, d in enumerate(deltas[third:]):
        live.append(d)
        if k % 7 == 0:
            w._render()
        if k == third:
            w.apply_colors(BUBBLES["dark"])
    w._render()
    assert w.rendered_text().startswith(w.segments[0].toPlainText())
    final = text[:-3]  # the reply's stored text is a little shorter than what streamed
    w.set_result(final, complete=False, finish_reason="cancelled")
    fresh = MessageWidget(2, "assistant", final, colors=BUBBLES["dark"])
    qtbot.addWidget(fresh)
    assert len(w.segments) == len(fresh.segments)
    for a, b in zip(w.segments, fresh.segments, strict=True):
        assert dump(a) == dump(b)
    # Views dropped on the way are out of sight at once, not only once Qt deletes them.
    assert [v for v in w.pieces.findChildren(PieceView) if v.isVisibleTo(w)] == w.segments

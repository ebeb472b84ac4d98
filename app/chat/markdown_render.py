"""What a reply's rendered Markdown gets on top of Qt's import: code blocks with syntax
colours, a language label and a Copy link each; shaded inline code; ruled tables.

Qt's Markdown import (GitHub dialect, HTML off: app.ui.safe_links.MARKDOWN) gives
headings, lists, tables and code, but code blocks without colour or shading.
Everything here only changes formats or adds the header line; the text the
model wrote is never parsed as markup. The Copy link's address carries a token
made per view (``copy_href``), so a link the model writes cannot pose as one.
"""
from __future__ import annotations

from collections.abc import Callable

from PySide6.QtGui import (QBrush, QColor, QFont, QTextBlock, QTextBlockFormat, QTextCharFormat, QTextCursor,
                           QTextDocument, QTextFormat, QTextFrameFormat, QTextLength, QTextTable)

from app.core.code_highlight import Span, label_for, spans

COPY_SCHEME = "hearth-copy"


def is_code(block: QTextBlock) -> bool:
    fmt = block.blockFormat()
    return fmt.hasProperty(QTextFormat.Property.BlockCodeFence) or \
        fmt.hasProperty(QTextFormat.Property.BlockCodeLanguage)


def code_groups(doc: QTextDocument) -> list[list[QTextBlock]]:
    """Each fenced code block as its run of document blocks, in order."""
    groups: list[list[QTextBlock]] = []
    block, prev_code = doc.begin(), False
    while block.isValid():
        code = is_code(block)
        if code:
            if not prev_code:
                groups.append([])
            groups[-1].append(block)
        prev_code = code
        block = block.next()
    return groups


def copy_href(token: str, index: int) -> str:
    return f"{COPY_SCHEME}:{token}/{index}"


SpansFor = Callable[[int, int, str, str], list[Span] | None]


def dress(doc: QTextDocument, colors: dict[str, str], scheme: str, token: str, *, continued: bool = False,
          spans_for: SpansFor | None = None) -> tuple[list[str], list[list[Span]], list[str]]:
    """Style ``doc`` in place; returns each block's code (the Copy links' targets), colours and language.

    ``continued``: the first block goes on from the view above (a long block cut in pieces), so it
    gets no header. ``spans_for(index, count, code, language)`` may give a block's colours instead of
    lexing it alone (a piece of a long block is coloured as part of the whole block).
    """
    groups = code_groups(doc)
    codes = ["\n".join(b.text() for b in g) for g in groups]
    used: list[list[Span]] = [[] for _ in groups]
    languages = [""] * len(groups)
    cursor = QTextCursor(doc)
    cursor.beginEditBlock()
    _shade_inline_code(doc, QColor(colors["code"]))
    for i in range(len(groups) - 1, -1, -1):  # from the end, so earlier positions stay valid
        first = groups[i][0]
        language = languages[i] = str(first.blockFormat().property(QTextFormat.Property.BlockCodeLanguage) or "")
        start, code = first.position(), codes[i]
        bg = _background(colors["code"])
        for b in groups[i]:
            cursor.setPosition(b.position())
            cursor.mergeBlockFormat(bg)
        given = spans_for(i, len(groups), code, language) if spans_for is not None else None
        used[i] = spans(code, language, scheme) if given is None else given
        for s in used[i]:
            cursor.setPosition(start + s.start)
            cursor.setPosition(start + s.end, QTextCursor.MoveMode.KeepAnchor)
            fmt = QTextCharFormat()
            if s.color:
                fmt.setForeground(QBrush(QColor(s.color)))
            if s.bold:
                fmt.setFontWeight(QFont.Weight.Bold)
            if s.italic:
                fmt.setFontItalic(True)
            cursor.mergeCharFormat(fmt)
        if not (continued and i == 0):
            _add_header(cursor, first, label_for(language), copy_href(token, i), colors)
    _rule_tables(doc, colors["border"])
    cursor.endEditBlock()
    return codes, used, languages


def _background(color: str) -> QTextBlockFormat:
    fmt = QTextBlockFormat()
    fmt.setBackground(QColor(color))
    return fmt


def _add_header(cursor: QTextCursor, first: QTextBlock, label: str, href: str, colors: dict[str, str]) -> None:
    """A line above the block: its language and a Copy link (not part of the code)."""
    cursor.setPosition(first.position())
    cursor.insertBlock(first.blockFormat(), first.charFormat())  # the code moves down one block
    cursor.movePosition(QTextCursor.MoveOperation.PreviousBlock)
    head = QTextBlockFormat()
    head.setBackground(QColor(colors["code"]))
    head.setTopMargin(6)
    cursor.setBlockFormat(head)
    plain = QTextCharFormat()
    plain.setForeground(QBrush(QColor(colors["muted"])))
    plain.setFontPointSize(max(7.0, QFont().pointSizeF() * 0.85))
    cursor.setBlockCharFormat(plain)
    cursor.insertText(f"{label}   ", plain)
    link = QTextCharFormat(plain)
    link.setAnchor(True)
    link.setAnchorHref(href)
    link.setForeground(QBrush(QColor(colors["link"])))
    link.setToolTip("Copy this code block")
    cursor.insertText("Copy", link)


def _shade_inline_code(doc: QTextDocument, color: QColor) -> None:
    cursor = QTextCursor(doc)
    block = doc.begin()
    while block.isValid():
        if not is_code(block):
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                if frag.charFormat().fontFixedPitch():
                    cursor.setPosition(frag.position())
                    cursor.setPosition(frag.position() + frag.length(), QTextCursor.MoveMode.KeepAnchor)
                    fmt = QTextCharFormat()
                    fmt.setBackground(color)
                    cursor.mergeCharFormat(fmt)
                it += 1
        block = block.next()


def _rule_tables(doc: QTextDocument, border: str) -> None:
    seen: set[int] = set()  # a table spans many blocks: style it once
    block = doc.begin()
    while block.isValid():
        table = QTextCursor(block).currentTable()
        if isinstance(table, QTextTable) and table.firstPosition() not in seen:
            seen.add(table.firstPosition())
            fmt = table.format()
            fmt.setBorder(1)
            fmt.setBorderBrush(QBrush(QColor(border)))
            fmt.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
            fmt.setBorderCollapse(True)
            fmt.setCellPadding(4)
            fmt.setCellSpacing(0)
            fmt.setWidth(QTextLength(QTextLength.Type.VariableLength, 0))
            table.setFormat(fmt)
        block = block.next()

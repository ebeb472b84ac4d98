"""One text view of a message: read-only, as tall as its document, links inert (app.ui.safe_links).

A reply is shown as a column of these (app.chat.reply_pieces). A long code block
may be cut across two views: the upper one then ends ``open_end`` (no bottom
margin) and the lower one is ``continued`` (no top margin, no second header), so
the block reads as one; ``whole_code`` gives the whole block's text for Copy.
"""
from __future__ import annotations

import secrets
from collections.abc import Callable

from PySide6.QtCore import QPoint, Qt, QUrl, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QWidget

from app.chat import markdown_render
from app.core.code_highlight import Span
from app.ui import safe_links

MARGIN = 4  # the document's margin, Qt's default
GAP = 4     # between two views of one message (ReplyPieces spaces them with it)


class AutoHeightBrowser(QTextBrowser):
    """A read-only text view as tall as its document, so the page scrolls, not each message."""

    link_refused = Signal(str)  # why a clicked link was not opened
    code_copied = Signal(str)   # a code block's Copy link was clicked: its code

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWordWrapMode(self.wordWrapMode().WrapAtWordBoundaryOrAnywhere)
        # Clicks only report the link: open_link asks first (a QTextBrowser would
        # otherwise open it, or navigate itself to a local file).
        self.setOpenLinks(False)
        self.anchorClicked.connect(self._open_link)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._menu)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.colors: dict[str, str] = {}
        self.codes: list[str] = []  # each code block's text, for its Copy link
        self.used_spans: list[list[Span]] = []  # each code block's colours
        self.languages: list[str] = []  # each code block's language
        self._token = secrets.token_hex(8)  # Copy links carry it: a link in the reply cannot pass for one
        self.markdown = ""  # what it shows
        self._gap = 0  # room above it (another view of the same message is there)
        self.continued = False  # its first code block goes on from the view above
        self.open_end = False   # its last code block goes on in the view below
        self.spans_for: markdown_render.SpansFor | None = None
        self.whole_code: Callable[[int], str | None] | None = None  # block index -> the whole block, if cut

    def _fit(self, *_args) -> None:
        m = self.contentsMargins()
        # A view whose code goes on below rounds down, so no sliver of the bubble shows between the two.
        h = int(self.document().size().height() + (0 if self.open_end else 0.999)) + m.top() + m.bottom() \
            + self._gap
        if h != self.height():
            self.setFixedHeight(max(h, 20))

    def set_gap(self, px: int) -> None:
        self._gap = px
        self.setViewportMargins(0, px, 0, 0)
        self._fit()

    def resizeEvent(self, e) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(e)
        self._fit()

    def set_markdown(self, text: str) -> None:
        doc = self.document()
        doc.setMarkdown(text, safe_links.MARKDOWN)
        self.markdown = text
        if self.continued or self.open_end:  # (setMarkdown resets the margins; setting them costs a layout)
            root = doc.rootFrame()
            fmt = root.frameFormat()
            fmt.setTopMargin(0 if self.continued else MARGIN)
            fmt.setBottomMargin(0 if self.open_end else MARGIN)
            root.setFrameFormat(fmt)
        safe_links.inert_images(doc)
        if self.colors:
            self.codes, self.used_spans, self.languages = markdown_render.dress(
                doc, self.colors, self.colors.get("scheme", "light"), self._token, continued=self.continued,
                spans_for=self.spans_for)

    def _code(self, index: int) -> str:
        whole = self.whole_code(index) if self.whole_code is not None else None
        return self.codes[index] if whole is None else whole

    def loadResource(self, kind: int, url: QUrl):  # noqa: N802 (Qt override)
        if safe_links.resource_allowed(url):
            return super().loadResource(kind, url)
        return safe_links.refused_resource(kind)

    def _open_link(self, url: QUrl) -> None:
        if url.scheme() == markdown_render.COPY_SCHEME:
            index = next((i for i in range(len(self.codes))
                          if url.toString() == markdown_render.copy_href(self._token, i)), None)
            if index is not None:
                self.code_copied.emit(self._code(index))
                return
        refused = safe_links.open_link(self, url)
        if refused:
            self.link_refused.emit(refused)

    def code_at(self, pos: QPoint) -> str | None:
        """The whole code block under ``pos`` (viewport coordinates), or None."""
        block = self.cursorForPosition(pos).block()
        if not markdown_render.is_code(block):
            return None
        groups = markdown_render.code_groups(self.document())
        index = next(i for i, g in enumerate(groups) if any(b.blockNumber() == block.blockNumber() for b in g))
        whole = self.whole_code(index) if self.whole_code is not None else None
        return "\n".join(b.text() for b in groups[index]) if whole is None else whole

    def _menu(self, pos: QPoint) -> None:
        menu = self.createStandardContextMenu(pos)
        code = self.code_at(pos)
        if code is not None:
            act = menu.addAction("Copy code block")
            act.triggered.connect(lambda: QGuiApplication.clipboard().setText(code))
            menu.insertAction(menu.actions()[0], act)
        menu.exec(self.viewport().mapToGlobal(pos))



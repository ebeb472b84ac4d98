"""A reply's sources: the passages retrieval gave it, listed under the reply, each a link to
a preview of exactly the text that was sent (never a page number read from the model's words).

The names come from the user's files and the texts from their pages, so both stay inert:
names are escaped into the one link line, and the preview shows the text as plain text.
"""
from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget


def grouped(sources: object) -> list[tuple[str, str]]:
    """The sources as (citation, text), one per page or section in the order given: two passages
    of one page are one citation, their texts joined."""
    out: dict[str, list[str]] = {}
    for s in sources if isinstance(sources, list) else ():
        if isinstance(s, dict) and isinstance(s.get("text"), str):
            out.setdefault(f"{s.get('doc', '')} {s.get('where', '')}".strip(), []).append(s["text"])
    return [(cite, "\n\n…\n\n".join(texts)) for cite, texts in out.items()]


class SourcePreview(QDialog):
    def __init__(self, cite: str, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(cite)
        self.resize(560, 420)
        lay = QVBoxLayout(self)
        head = QLabel(f"{cite}: the text this reply was given, as it was sent")
        head.setTextFormat(Qt.TextFormat.PlainText)
        head.setWordWrap(True)
        lay.addWidget(head)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setPlainText(text)
        lay.addWidget(self.text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)


class SourcesLine(QLabel):
    """'Sources: big.pdf p. 42 · big.pdf p. 7', each opening its preview; hidden when none."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setOpenExternalLinks(False)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse
                                     | Qt.TextInteractionFlag.LinksAccessibleByKeyboard)
        self.setWordWrap(True)
        self.setStyleSheet("color: palette(placeholder-text);")
        self.items: list[tuple[str, str]] = []
        self.preview: SourcePreview | None = None
        self.linkActivated.connect(self.open_source)
        self.hide()

    def set_sources(self, sources: object) -> None:
        self.items = grouped(sources)
        links = [f'<a href="source:{i}">{html.escape(cite)}</a>' for i, (cite, _) in enumerate(self.items)]
        self.setText("Sources: " + " · ".join(links) if links else "")
        self.setVisible(bool(links))

    def open_source(self, href: str) -> None:
        """Show the source a link names (``source:N``); any other link does nothing."""
        kind, _, n = href.partition(":")
        if kind != "source" or not n.isdigit() or int(n) >= len(self.items):
            return
        cite, text = self.items[int(n)]
        if self.preview is not None:
            self.preview.close()
        self.preview = SourcePreview(cite, text, self.window())
        self.preview.show()

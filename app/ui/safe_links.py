"""Model output is untrusted text: links and resources in a reply stay inert.

A reply can hold any Markdown the model was led to write, so:
- a link opens only after the user confirms it in a dialog that shows the
  whole address, and only for http, https and mailto; file:, javascript: and
  every other scheme (an app's own custom scheme included) are never opened;
- images and other resources are never fetched, not even local files (a
  ``file:`` image was read from disk, and ``file:///dev/zero`` never ends); an
  image shows as its alt text instead. Only inline ``data:`` images render;
- raw HTML in a reply is shown as text, not interpreted (see MARKDOWN).
"""
from __future__ import annotations

from urllib.parse import urlsplit

from PySide6.QtCore import QByteArray, Qt, QUrl
from PySide6.QtGui import QDesktopServices, QImage, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat
from PySide6.QtWidgets import QMessageBox, QWidget

SAFE_SCHEMES = ("http", "https", "mailto")
# GitHub-flavoured Markdown, with HTML blocks and spans taken as plain text.
MARKDOWN = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | QTextDocument.MarkdownFeature.MarkdownNoHTML


def link_allowed(url: str) -> bool:
    """Whether a link from a reply may be opened at all (after the user confirms)."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:  # e.g. a malformed IPv6 host
        return False
    scheme = parts.scheme.lower()
    if scheme not in SAFE_SCHEMES:
        return False
    return bool(parts.path) if scheme == "mailto" else bool(parts.hostname)


def shown_address(url: QUrl) -> str:
    """The address as the dialog shows it: fully encoded, so a look-alike host or a
    hidden character cannot pass for something else."""
    return url.toString(QUrl.ComponentFormattingOption.FullyEncoded)


def open_link(parent: QWidget, url: QUrl) -> str | None:
    """Ask before opening ``url``; returns a message when it is refused outright."""
    address = shown_address(url)
    if not link_allowed(address):
        scheme = url.scheme() or "relative"
        return f"Not opened: Hearth never opens {scheme} links from a reply ({address})."
    box = QMessageBox(QMessageBox.Icon.Question, "Open link?",
                      f"Open this link from the reply?\n\n{address}",
                      QMessageBox.StandardButton.Open | QMessageBox.StandardButton.Cancel, parent)
    box.setTextFormat(Qt.TextFormat.PlainText)  # the address is shown as text, never as markup
    box.setInformativeText("The model wrote this link. Check the address before you open it.")
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    if box.exec() == QMessageBox.StandardButton.Open:
        QDesktopServices.openUrl(url)
    return None


def resource_allowed(url: QUrl) -> bool:
    """Only inline data may be rendered; nothing is fetched from disk or the network."""
    return url.scheme().lower() == "data"


def refused_resource(kind: int):
    """What a text view returns for a refused resource. It must not be None: for None,
    QTextDocument falls back to reading local files itself."""
    return QImage() if kind == QTextDocument.ResourceType.ImageResource.value else QByteArray()


def inert_images(doc: QTextDocument) -> int:
    """Replace every image that is not inline data with ``[image: alt]`` text; returns how many."""
    found: list[tuple[int, str]] = []
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            fmt = frag.charFormat()
            if fmt.isImageFormat() and not resource_allowed(QUrl(fmt.toImageFormat().name())):
                alt = fmt.property(QTextFormat.Property.ImageAltText) or "image"
                for i in range(frag.length()):  # one object character per image
                    found.append((frag.position() + i, str(alt)))
            it += 1
        block = block.next()
    cursor = QTextCursor(doc)
    for pos, alt in reversed(found):  # from the end, so earlier positions stay valid
        cursor.setPosition(pos)
        cursor.setPosition(pos + 1, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(f"[image: {alt}]", QTextCharFormat())
    return len(found)

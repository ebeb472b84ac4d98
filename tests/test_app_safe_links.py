"""Model output stays inert: a link opens only after the user confirms it, and only for
http/https/mailto; images and other resources in a reply are never fetched."""
from __future__ import annotations

import base64

import pytest
from PySide6.QtCore import QBuffer, QObject, Qt, QTimer, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QImage, QTextCursor, QTextDocument
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMessageBox

from app.chat.message_widget import MessageWidget
from app.ui.safe_links import link_allowed
from app.ui.theme import BUBBLES

SCHEMES = ("http", "https", "mailto", "file", "javascript", "myapp", "data", "ftp")


class _Catcher(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    @Slot(QUrl)
    def handle(self, url: QUrl) -> None:
        self.urls.append(url.toString(QUrl.ComponentFormattingOption.FullyEncoded))


@pytest.fixture
def opened():
    """Every URL QDesktopServices is asked to open, whatever its scheme; nothing really opens."""
    catcher = _Catcher()
    for scheme in SCHEMES:
        QDesktopServices.setUrlHandler(scheme, catcher, "handle")
    yield catcher.urls
    for scheme in SCHEMES:
        QDesktopServices.unsetUrlHandler(scheme)


def _reply(qtbot, text: str) -> MessageWidget:
    w = MessageWidget(1, "assistant", text, colors=BUBBLES["light"])
    qtbot.addWidget(w)
    w.resize(700, 400)
    w.show()
    qtbot.waitExposed(w)
    return w


def _fragments(doc: QTextDocument):
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            yield it.fragment()
            it += 1
        block = block.next()


def _click_link(qtbot, view, href: str, answer=None) -> list[str]:
    """Click the link to ``href`` with the mouse; answer a dialog if one opens. Returns
    the texts of the dialogs that opened."""
    frag = next((f for f in _fragments(view.document()) if f.charFormat().anchorHref() == href), None)
    assert frag is not None, f"no link to {href} in the view (it navigated away: {view.toPlainText()[:80]!r})"
    cursor = QTextCursor(view.document())
    cursor.setPosition(frag.position() + frag.length() // 2)
    point = view.cursorRect(cursor).center()
    seen: list[str] = []

    def answer_dialog() -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            seen.append(f"{box.text()}\n{box.informativeText()}")
            box.button(answer or QMessageBox.StandardButton.Cancel).click()

    QTimer.singleShot(100, answer_dialog)
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, point)
    qtbot.wait(150)
    return seen


def test_which_links_may_open_at_all():
    for url in ("https://example.com/a?b=1", "http://localhost:8080/", "mailto:me@example.com"):
        assert link_allowed(url), url
    for url in ("javascript:alert(1)", "JavaScript:alert(1)", "file:///etc/passwd", "myapp://do/it",
                "notes.html", "//example.com/x", "http:no-host", "data:text/html,<b>x</b>", "ftp://example.com/",
                "mailto:", "java\tscript:alert(1)", "http://[::1"):
        assert not link_allowed(url), url


def test_a_link_in_a_reply_asks_first_and_only_safe_schemes_open(qtbot, opened, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET FILE CONTENTS")
    local = QUrl.fromLocalFile(str(secret)).toString()
    site = "https://example.com/path?q=1&r=2#top"
    w = _reply(qtbot, f"Try [this](javascript:alert(1)), [that]({local}), [app](myapp://do/it), "
                      f"[here](secret.txt), [site]({site}) or [mail](mailto:me@example.com).")
    notes: list[str] = []
    w.notify.connect(notes.append)
    for href in ("javascript:alert(1)", local, "myapp://do/it", "secret.txt"):
        assert _click_link(qtbot, w.body, href) == [], href  # refused without a dialog
        assert opened == [], href
    assert "SECRET" not in w.rendered_text() and w.body.source().isEmpty()  # the view did not follow it
    assert len(notes) == 4 and all(n.startswith("Not opened") for n in notes)
    assert "javascript:alert(1)" in notes[0]

    seen = _click_link(qtbot, w.body, site)  # cancelled
    assert len(seen) == 1 and site in seen[0] and "model wrote this link" in seen[0]
    assert opened == []
    assert _click_link(qtbot, w.body, site, QMessageBox.StandardButton.Open) != []
    assert opened == [site]
    assert _click_link(qtbot, w.body, "mailto:me@example.com", QMessageBox.StandardButton.Open) != []
    assert opened == [site, "mailto:me@example.com"]


def test_a_link_whose_text_is_another_address_shows_the_real_one(qtbot, opened):
    w = _reply(qtbot, "[https://bank.example/](https://evil.example/login)")
    seen = _click_link(qtbot, w.body, "https://evil.example/login")
    assert len(seen) == 1 and "https://evil.example/login" in seen[0] and opened == []


def test_images_and_html_in_a_reply_load_nothing(qtbot, tmp_path):
    png = tmp_path / "pixel.png"
    img = QImage(4, 4, QImage.Format.Format_RGB32)
    img.fill(0xFF0000)
    img.save(str(png))
    local = QUrl.fromLocalFile(str(png))
    buf = QBuffer()
    buf.open(QBuffer.OpenModeFlag.WriteOnly)
    img.save(buf, "PNG")
    inline = "data:image/png;base64," + base64.b64encode(bytes(buf.data())).decode()
    w = _reply(qtbot, f"![remote](http://example.com/x.png \"t\") and ![local]({local.toString()})\n\n"
                      '<img src="http://example.com/y.png" alt="html"> <iframe src="http://example.com/"></iframe> '
                      '<a href="javascript:alert(2)">html link</a>\n\n'
                      f"![inline]({inline})")
    text = w.rendered_text()
    assert "[image: remote]" in text and "[image: local]" in text
    # Raw HTML is shown as the text the model wrote, never interpreted.
    assert '<img src="http://example.com/y.png" alt="html">' in text
    assert '<iframe src="http://example.com/"></iframe>' in text and "<a href=" in text
    frags = list(_fragments(w.body.document()))
    assert not [f for f in frags if f.charFormat().anchorHref().startswith("javascript")]
    images = [f.charFormat().toImageFormat().name() for f in frags if f.charFormat().isImageFormat()]
    assert images == [inline]  # inline data renders; nothing else is an image any more
    got = w.body.document().resource(QTextDocument.ResourceType.ImageResource.value, local)
    assert got is None or got.isNull()  # the local file was never read
    assert w.body.loadResource(QTextDocument.ResourceType.ImageResource.value, QUrl("http://example.com/x.png")).isNull()

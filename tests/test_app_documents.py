"""Documents in the window, end to end on the bundled model: attach (the tray, a drop on the
message box), a chip per document, the question sent with them, the files stored by hash,
the documents read once by the prefix cache, and the chips back after a restart."""
from __future__ import annotations

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from app.window.selftest import wait_until
from doc_files import book_pages, make_pdf
from engine.prompt.messages import DocumentPart


def send(qtbot, w, text: str) -> int:
    w.chat.set_input_text(text)
    w.chat._submit()
    assert w.stream is not None, w.info.messages()
    mid = w.stream.mid
    assert wait_until(lambda: w.stream is None, 120)
    return mid


def test_documents_go_with_the_question_and_are_read_once(qtbot, make_window, tmp_path):
    pdf = make_pdf(tmp_path / "manual.pdf", book_pages(4, 120))
    notes = tmp_path / "notes.md"
    notes.write_text("# Notizen\nDer Schlüssel liegt unter der Matte. 🔑\n", encoding="utf-8")
    w = make_window(max_tokens=8, temperature=0)
    tray = w.chat.attach
    tray.add_paths([str(pdf), str(notes)])
    qtbot.waitUntil(lambda: len(tray.items) == 2, timeout=30_000)
    assert [tray.chips.itemAt(i).widget().text() for i in range(tray.chips.count())] == [
        "📄 manual.pdf ✕", "📄 notes.md ✕"]
    assert "2 attached" in tray.status.text() and "tokens" in tray.status.text()
    assert "4 pages" in tray.chips.itemAt(0).widget().toolTip()

    first = send(qtbot, w, "Where is the key?")
    assert tray.items == []  # sent: the tray is empty again
    cid = w.current
    user = w.store.messages(cid)[0]
    docs = [p for p in user.parts if isinstance(p, DocumentPart)]
    assert [(d.name, d.pages) for d in docs] == [("manual.pdf", 4), ("notes.md", None)]
    assert all(w.store.attachments.has(d.sha256) for d in docs)
    assert w.store.attachments.read(docs[0].sha256) == pdf.read_bytes()
    system = w.replies.history(cid, "")[0]
    assert system.role == "system" and "Der Schlüssel liegt unter der Matte." in system.content
    assert "[page 4]" in system.content and "Page marker 4." in system.content
    m1 = w.store.message(first).metrics
    assert m1["prompt_tokens"] > 500
    assert m1["notes"][0] == "given the documents whole: manual.pdf, notes.md"  # the reply names them

    second = send(qtbot, w, "And what else?")
    m2 = w.store.message(second).metrics
    # Only the new turn is read: the documents sit in the prefix before it.
    assert m2["cached_tokens"] >= m1["prompt_tokens"] - 1
    assert m2["prompt_tokens"] - m2["cached_tokens"] < 40
    assert w.chat.widget(w.store.messages(cid)[0].id).documents.text() == "📄 manual.pdf · 4 pages   📄 notes.md"
    # A document added now goes before the earlier turns: the tray says they are read once more.
    extra = tmp_path / "later.txt"
    extra.write_text("later")
    tray.add_paths([str(extra)])
    qtbot.waitUntil(lambda: len(tray.items) == 1, timeout=30_000)
    conv = m2["prompt_tokens"] + m2["generated_tokens"]
    assert f"then the {conv:,} tokens of this conversation are read once more" in tray.status.text()


def test_a_drop_on_the_message_box_attaches_and_a_bad_file_is_one_line(qtbot, make_window, tmp_path):
    good = tmp_path / "a.txt"
    good.write_text("alpha")
    bad = tmp_path / "b.bin"
    bad.write_bytes(b"\x00\x01\x02" * 100)
    w = make_window()
    w.chat.set_input_text("my words")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(good)), QUrl.fromLocalFile(str(bad))])
    box = w.chat.input
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(box.viewport(), enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(box.viewport(), drop)
    qtbot.waitUntil(lambda: len(w.chat.attach.items) == 1, timeout=20_000)
    qtbot.waitUntil(lambda: any("b.bin is not a text file" in m for m in w.info.messages()), timeout=5_000)
    assert w.chat.input_text() == "my words"  # nothing typed is lost: the drop added no text


def test_the_chips_come_back_after_a_restart(qtbot, make_window, tmp_path):
    f = tmp_path / "recipe.txt"
    f.write_text("Flour, water, salt.")
    w = make_window(max_tokens=4)
    w.chat.attach.add_paths([str(f)])
    qtbot.waitUntil(lambda: len(w.chat.attach.items) == 1, timeout=20_000)
    send(qtbot, w, "What do I need?")
    cid = w.current
    w.close()
    w2 = make_window(write=False)
    w2.open_conversation(cid)
    qtbot.waitUntil(lambda: w2.current == cid, timeout=5_000)
    user = w2.store.messages(cid)[0]
    assert w2.chat.widget(user.id).documents.text() == "📄 recipe.txt"
    assert "Flour, water, salt." in w2.replies.history(cid, "")[0].content


def test_documents_too_long_for_the_context_are_retrieved_and_cited(qtbot, make_window, tmp_path):
    pdf = make_pdf(tmp_path / "big.pdf", book_pages(60, 200))
    w = make_window(max_tokens=4)
    w.chat.attach.add_paths([str(pdf)])
    qtbot.waitUntil(lambda: len(w.chat.attach.items) == 1, timeout=60_000)
    assert "% of the" in w.chat.attach.status.text()  # what it would take of the context, before sending
    page = w.chat.attach.items[0].doc.pages[41]
    words = [x for x in page.split() if len(x) > 6][:4]
    mid = send(qtbot, w, "Tell me about " + " ".join(words))
    note = w.store.message(mid).metrics["notes"][0]
    assert "too long for the" in note and "big.pdf p. " in note
    system = w.replies.history(w.current, "")[0].content
    cited = note.split("match the question best: ")[1].split("; ")
    assert all(f'<passage source="{c}">' in system for c in cited)  # a citation is what was sent
    assert "big.pdf p. 42" in cited
    # Under the reply, each cited page is a link to a preview of the text it was given.
    line = w.chat.widget(mid).sources
    assert line.isVisible() and line.text().startswith("Sources: ")
    assert [c for c, _ in line.items] == list(dict.fromkeys(cited))
    at = [c for c, _ in line.items].index("big.pdf p. 42")
    line.linkActivated.emit("https://example.com/")  # any other link does nothing
    assert line.preview is None
    line.linkActivated.emit(f"source:{at}")
    assert line.preview is not None and line.preview.windowTitle() == "big.pdf p. 42"
    shown = line.preview.text.toPlainText()
    assert all(x in shown for x in words)
    assert all(part in system for part in shown.split("\n\n…\n\n"))  # exactly the text sent
    line.preview.close()
    # After a restart the sources are read back from the reply's metrics.
    cid = w.current
    w.close()
    w2 = make_window(write=False)
    w2.open_conversation(cid)
    qtbot.waitUntil(lambda: w2.current == cid, timeout=5_000)
    assert [c for c, _ in w2.chat.widget(mid).sources.items] == list(dict.fromkeys(cited))


def test_export_carries_the_documents_and_import_restores_them(tmp_path):
    """A conversation with a document goes to another machine whole: the file travels as base64."""
    import json

    from app.core import export
    from app.core.store import Store
    from engine.prompt.messages import TextPart

    a = Store(tmp_path / "a" / "hearth.db")
    sha = a.attachments.put(b"%PDF-not-really but bytes")
    cid = a.create_conversation().id
    a.start_turn(cid, "Read this", attached=[DocumentPart(sha, "x.pdf", 1, "application/pdf")])
    text = export.to_json(a, cid)
    b = Store(tmp_path / "b" / "hearth.db")
    new = export.import_json(b, text)
    user = b.messages(new)[0]
    assert user.parts == (TextPart("Read this"), DocumentPart(sha, "x.pdf", 1, "application/pdf"))
    assert b.attachments.read(sha) == b"%PDF-not-really but bytes"
    data = json.loads(text)
    data["attachments"][sha] = "bm90IHRoZSBzYW1lIGZpbGU="  # base64 of other bytes
    import pytest
    with pytest.raises(export.ImportFailed, match="does not match its SHA-256"):
        export.import_json(b, json.dumps(data))
    assert len(b.list_conversations()) == 1  # the damaged file added nothing

"""The attachment store: images and documents kept once by SHA-256 beside the database, and
removed only once no message, hidden or not, can need them again."""
from __future__ import annotations

import hashlib

import pytest

from app.core.attachments import AttachmentError, Attachments
from app.core.store import Store
from engine.prompt.messages import DocumentPart, ImagePart, TextPart


def test_put_is_once_per_content_and_read_checks_the_hash(tmp_path):
    a = Attachments(tmp_path / "att")
    data = b"\x89PNG fake but bytes"
    sha = a.put(data)
    assert sha == hashlib.sha256(data).hexdigest()
    assert a.path(sha) == tmp_path / "att" / sha[:2] / sha
    assert a.put(data) == sha and a.stored() == {sha}
    assert a.read(sha) == data
    a.path(sha).write_bytes(b"changed on disk")
    with pytest.raises(AttachmentError, match="damaged"):
        a.read(sha)
    with pytest.raises(AttachmentError, match="missing"):
        a.read("0" * 64)
    with pytest.raises(AttachmentError, match="SHA-256"):
        a.path("../../etc/passwd")


def test_put_file_copies(tmp_path):
    src = tmp_path / "notes.md"
    src.write_text("# Notes\nhello", encoding="utf-8")
    a = Attachments(tmp_path / "att")
    sha = a.put_file(src)
    src.unlink()
    assert a.read(sha).decode() == "# Notes\nhello"
    with pytest.raises(AttachmentError, match="could not read"):
        a.put_file(tmp_path / "gone.pdf")


def test_deleted_conversation_keeps_its_attachments_until_purged(tmp_path):
    store = Store(tmp_path / "h.db")
    shared = store.attachments.put(b"used by both")
    own = store.attachments.put(b"used by one")
    orphan = store.attachments.put(b"used by none")
    keep = store.create_conversation("keep")
    drop = store.create_conversation("drop")
    store.add_message(keep.id, "user", parts=(TextPart("see"), ImagePart(shared, "image/png")))
    store.add_message(drop.id, "user", parts=(ImagePart(shared, "image/png"),
                                              DocumentPart(own, "a.pdf", 3, "application/pdf")))
    store.delete_conversation(drop.id)
    # undo must still find the files: nothing goes while the conversation is only flagged
    store.restore_conversation(drop.id)
    assert store.attachments.stored() == {shared, own, orphan}
    store.delete_conversation(drop.id)
    store.close()

    again = Store(tmp_path / "h.db")  # the next start-up purges, and only then collects
    assert again.purge_deleted() == 1
    assert again.attachments.stored() == {shared}
    assert again.messages(keep.id)[0].parts[1] == ImagePart(shared, "image/png")
    again.close()


def test_hidden_messages_keep_their_attachments(tmp_path):
    store = Store(tmp_path / "h.db")
    sha = store.attachments.put(b"img")
    c = store.create_conversation()
    mid = store.add_message(c.id, "user", parts=(ImagePart(sha, "image/png"),))
    store.hide_from(c.id, mid)  # an edit or a failed send: flagged, still a sibling branch
    store.purge_deleted()
    assert store.attachments.has(sha)
    store.close()

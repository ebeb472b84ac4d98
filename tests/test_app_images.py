"""Images in the window, end to end on a real vision GGUF with its projector (tests/vlm_model.py):
attach by file, paste and drop; thumbnails in the box and the history; the reply streams; the image
and the reply survive a restart, export and import; a text-only model keeps the message in the box."""
from __future__ import annotations

import json

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage
from PySide6.QtWidgets import QApplication

from app.core.settings import Settings, SettingsFile
from test_app_documents import send as send_and_wait
from engine.prompt.messages import ImagePart
from test_images import png


def send(w, text: str) -> int:
    return send_and_wait(None, w, text)


def vision_settings(tiny_vlm, tmp_path) -> None:
    folder = tmp_path / "models"
    folder.mkdir(exist_ok=True)
    for f in tiny_vlm:  # the model and its projector side by side, as a download leaves them
        if not (folder / f.name).exists():
            (folder / f.name).symlink_to(f)
    s = Settings(model=str(folder / tiny_vlm[0].name), draft="none", context=2048)
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 8})
    SettingsFile().save(s)


def test_an_image_by_file_paste_and_drop_goes_with_the_question_and_survives_a_restart(
        qtbot, make_window, tiny_vlm, tmp_path):
    vision_settings(tiny_vlm, tmp_path)
    w = make_window(write=False)
    assert w.host.sees_images and "sees images" in w.loading.model_label.text()
    tray = w.chat.attach
    picture = tmp_path / "cat.png"
    picture.write_bytes(png(30))
    tray.add_paths([str(picture)])  # the paperclip → Attach files…
    QApplication.clipboard().setImage(QImage.fromData(png(31)))
    w.chat.input.paste()  # Ctrl+V of a screenshot
    third = tmp_path / "dog.jpg"
    third.write_bytes(png(32, fmt="JPEG"))
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(third))])
    box = w.chat.input
    QApplication.sendEvent(box.viewport(), QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, mime,
                                                           Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier))
    QApplication.sendEvent(box.viewport(), QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime,
                                                      Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier))
    assert [p.name for p in tray.images] == ["cat.png", "Pasted image", "dog.jpg"]
    assert box.toPlainText() == ""  # the paste added no text
    # Before sending, the box says what the images take of the context, as the model counts them.
    qtbot.waitUntil(lambda: len(tray.image_tokens) == 3, timeout=20_000)
    n = sum(tray.image_tokens.values())
    assert n >= 3 * 20 and f"3 images attached · {n:,} tokens (" in tray.status.text()

    first = send(w, "What is in these pictures?")
    assert tray.images == []
    cid = w.current
    user = w.store.messages(cid)[0]
    shas = [p.sha256 for p in user.parts if isinstance(p, ImagePart)]
    assert len(shas) == 3 and w.store.attachments.read(shas[0]) == picture.read_bytes()
    reply1 = w.store.message(first)
    assert reply1.content and reply1.error is None
    assert w.chat.widget(user.id).images.shown == shas  # thumbnails in the history
    second = send(w, "And the colours?")
    m1, m2 = reply1.metrics, w.store.message(second).metrics
    assert m1["prompt_tokens"] - n < 40  # the count was exact: the rest is the template and the words
    assert m2["cached_tokens"] >= m1["prompt_tokens"] - 1  # the images were read once

    w.close()
    w2 = make_window(write=False)
    w2.open_conversation(cid)
    qtbot.waitUntil(lambda: w2.current == cid, timeout=5_000)
    assert w2.chat.widget(user.id).images.shown == shas
    assert w2.store.message(first).content == reply1.content
    history = w2.replies.history(cid, "")
    assert [p.data for p in history[0].parts if isinstance(p, ImagePart)][0] == picture.read_bytes()

    from app.core import export
    from app.core.store import Store

    text = export.to_json(w2.store, cid)
    assert all(s in json.loads(text)["attachments"] for s in shas)  # base64, carried whole
    other = Store(tmp_path / "other" / "hearth.db")
    new = export.import_json(other, text)
    assert other.messages(new)[0].parts == user.parts
    assert other.attachments.read(shas[1]) == w2.store.attachments.read(shas[1])
    assert export.to_json(other, new) == text  # the JSON round trip is identical, images included


def test_a_text_only_model_keeps_the_image_and_the_words_in_the_box(qtbot, make_window, tmp_path):
    w = make_window()
    assert not w.host.sees_images
    assert w.chat.attach.add_image(png(33), "photo.png")
    w.chat.set_input_text("Describe it")
    w.chat._submit()
    assert w.stream is None
    assert any("cannot see images" in m for m in w.info.messages())
    assert w.chat.input_text() == "Describe it" and len(w.chat.attach.images) == 1
    assert w.store.messages(w.current) == []


def test_a_bad_image_is_one_line_and_nothing_else_is_touched(qtbot, make_window, tmp_path):
    w = make_window(start=False)
    w.chat.set_input_text("keep me")
    assert not w.chat.attach.add_image(png(34)[:120], "broken.png")
    assert not w.chat.attach.add_image(b"not an image at all", "notes.png")
    lines = w.info.messages()
    assert any("broken.png is corrupt" in m for m in lines) and any("notes.png is not an image" in m for m in lines)
    assert w.chat.attach.images == [] and w.chat.input_text() == "keep me"


def test_a_deleted_conversations_images_go_only_when_the_deletion_cannot_be_undone(tmp_path):
    from app.core.store import Store

    s = Store(tmp_path / "hearth.db")
    shared, own = s.attachments.put(png(40)), s.attachments.put(png(41))
    a, b = s.create_conversation().id, s.create_conversation().id
    s.start_turn(a, "two", attached=[ImagePart(shared, "image/png"), ImagePart(own, "image/png")])
    s.start_turn(b, "one", attached=[ImagePart(shared, "image/png")])
    s.delete_conversation(a)
    s.attachments.collect(s._conn)  # what any tidy-up does while undo is still possible
    assert s.attachments.has(own)
    s.restore_conversation(a)
    assert [p.sha256 for p in s.messages(a)[0].parts if isinstance(p, ImagePart)] == [shared, own]
    s.delete_conversation(a)
    s.purge_deleted()  # the next start: the deletion can no longer be undone
    assert not s.attachments.has(own) and s.attachments.has(shared)  # the other conversation still shows it


def test_the_projector_is_chosen_by_hand_in_settings_or_turned_off(qtbot, data_dir, tiny_vlm, tmp_path):
    import pytest

    from app.core.settings import SettingsError
    from app.settings_ui.settings_dialog import SettingsDialog
    from engine.loading.load import load_model

    model, mmproj = tiny_vlm
    dlg = SettingsDialog(Settings(model=str(model)))
    qtbot.addWidget(dlg)
    assert dlg.projector.value() == "auto"
    dlg.projector.set_value(str(mmproj))  # what "Choose…" sets
    s = dlg.build()
    assert s.mmproj == str(mmproj) and s.load_spec().mmproj == str(mmproj)
    SettingsFile().save(s)
    assert SettingsFile().load()[0].mmproj == str(mmproj)  # kept across a restart
    dlg.projector.set_value("none")
    off = dlg.build().load_spec()
    loaded = load_model(off, data_dir=None)
    try:
        assert off.mmproj == "none" and not loaded.model.sees_images  # text only, as chosen
    finally:
        loaded.engine.close()
    with pytest.raises(SettingsError, match="mmproj: must be auto, none or a vision projector"):
        Settings(mmproj=str(tmp_path / "gone.gguf")).validate()


def test_a_missing_image_file_shows_its_place_and_the_rest_still_shows(qtbot, make_window):
    w = make_window(start=False)
    cid = w.current
    keep, lose = w.store.attachments.put(png(71)), w.store.attachments.put(png(72))
    w.store.start_turn(cid, "two pictures", attached=[ImagePart(keep, "image/png"), ImagePart(lose, "image/png")])
    w.store.attachments.path(lose).unlink()  # gone behind Hearth's back
    w.open_conversation(cid)
    user = w.store.messages(cid)[0]
    strip = w.chat.widget(user.id).images
    labels = [strip.row.itemAt(i).widget() for i in range(strip.row.count()) if strip.row.itemAt(i).widget()]
    assert strip.shown == [keep, lose] and labels[1].text() == f"[image {lose[:12]} is missing]"
    parts = w.replies.history(cid, "")[0].parts
    assert [p.data is not None for p in parts if isinstance(p, ImagePart)] == [True, False]

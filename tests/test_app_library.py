"""The model library in the real window (offscreen): fit badges for a simulated 8 GiB GPU,
drag-and-drop import, delete with confirmation (never the bundled model), load from the
library with the recent-models menu, and the loaded model's drafts offered by name in Settings."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QObject, QPointF, Qt, QUrl, Slot
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QMessageBox

from app.window.main_window import MainWindow
from app.window.selftest import write_settings
from engine.library import local as lib
from engine.models.gguf import model_info
from engine.sizing.hardware import simulated
from gguf_writer import write_gguf
from model_files import write_model_gguf

HW8 = simulated("8GiB", "16GiB", cores=8)


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HEARTH_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    (tmp_path / "models").mkdir()
    return tmp_path


@pytest.fixture
def window(qtbot, dirs):
    write_settings(max_tokens=8)
    w = MainWindow()
    w.show()
    w.models_dock.library_view.hardware = HW8
    yield w
    w.close()


def settle(qtbot, view) -> None:
    """Wait for the library's background scan (and any import) to finish."""
    qtbot.waitUntil(lambda: view.scanning == 0 and view.importing == 0, timeout=60_000)


def rows(view) -> dict[str, int]:
    return {m.path.name: i for i, m in enumerate(view.models)}


def wait_badges(qtbot, view) -> None:
    qtbot.waitUntil(lambda: all(view.badge_of(m.path) != "…" for m in view.models if not m.error), timeout=60_000)


def tiny_draft(path, bundled_path):
    """A header-only GGUF with the bundled model's vocabulary and one small block."""
    info = model_info(bundled_path)
    meta = {"general.architecture": "llama", "general.name": "tiny-draft", "llama.block_count": 1,
            "llama.embedding_length": 64, "llama.attention.head_count": 4, "llama.context_length": 2048,
            "llama.feed_forward_length": 128, "tokenizer.ggml.model": info.tokenizer_model,
            "tokenizer.ggml.tokens": info.tokens}
    return write_gguf(path, meta, [("token_embd.weight", (64, len(info.tokens)), 0),
                                   ("blk.0.attn_q.weight", (64, 64), 0)])


def test_fit_badges_for_a_simulated_8_gib_gpu(qtbot, window, dirs, bundled_path):
    write_model_gguf(dirs / "models" / "qwen7.gguf", "qwen2.5-7b", "Q4_K_M")
    write_model_gguf(dirs / "models" / "qwen14.gguf", "qwen2.5-14b", "Q4_K_M")
    write_model_gguf(dirs / "models" / "qwen14-f16.gguf", "qwen2.5-14b", "F16")
    window.act_library.trigger()
    view = window.models_dock.library_view
    settle(qtbot, view)
    assert window.models_dock.isVisible()
    wait_badges(qtbot, view)
    assert view.badge_of(dirs / "models" / "qwen7.gguf") == lib.FIT_GPU
    assert view.badge_of(dirs / "models" / "qwen14.gguf") == lib.FIT_OFFLOAD
    assert view.badge_of(dirs / "models" / "qwen14-f16.gguf") == lib.FIT_NO
    assert view.badge_of(bundled_path) == lib.FIT_GPU
    r = rows(view)["qwen14.gguf"]
    assert view.table.item(r, lib_col("Fit")).text() == lib.FIT_OFFLOAD
    assert "/48" in view.table.item(r, lib_col("Fit")).toolTip()      # the planner's summary
    assert view.table.item(r, lib_col("Quantization")).text() == "Q4_K_M"
    assert view.table.item(r, lib_col("Parameters")).text() == "14.8B"
    assert view.table.item(r, lib_col("Context")).text() == "32,768"
    for c in range(1, view.table.columnCount()):  # every figure and badge readable, not cut to "par…"
        assert view.table.columnWidth(c) >= view.table.sizeHintForColumn(c), view.table.horizontalHeaderItem(c).text()
    view.hardware = simulated("none", "16GiB", cores=8)
    view.refresh()
    qtbot.waitUntil(lambda: view.table.item(rows(view)["qwen7.gguf"], lib_col("Fit")).text() == lib.FIT_CPU,
                    timeout=60_000)


def lib_col(name: str) -> int:
    from app.library.library_view import COLUMNS

    return COLUMNS.index(name)


def drop(window, paths) -> None:
    """Drag files over the window and drop them, delivered the way the platform does: to the
    window's QWindow, which passes them to the widget under the pointer."""
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    at = window.conversations.mapTo(window, window.conversations.rect().center())
    enter = QDragEnterEvent(at, Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    assert QApplication.sendEvent(window.windowHandle(), enter) and enter.isAccepted()
    ev = QDropEvent(QPointF(at), Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton,
                    Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window.windowHandle(), ev)
    assert ev.isAccepted()


def test_drag_and_drop_imports_a_gguf(qtbot, window, dirs):
    src = write_model_gguf(dirs / "downloads" / "dropped-model.gguf", "qwen2.5-0.5b", "Q8_0")
    drop(window, [src])
    view = window.models_dock.library_view
    settle(qtbot, view)
    dest = dirs / "models" / "dropped-model.gguf"
    assert dest.is_file() and dest.stat().st_ino == src.stat().st_ino       # same file system: a hard link
    assert window.models_dock.isVisible() and "dropped-model.gguf" in rows(view)
    assert view.selected().path == dest
    assert any("Added dropped-model.gguf" in m for m in window.info.messages())
    (dirs / "downloads" / "broken.gguf").write_bytes(b"GGUF but nothing else")
    drop(window, [dirs / "downloads" / "broken.gguf"])
    settle(qtbot, view)
    assert not (dirs / "models" / "broken.gguf").exists()
    assert any("broken.gguf" in m and "GGUF" in m for m in window.info.messages())


def test_delete_asks_first_and_the_bundled_model_cannot_be_deleted(qtbot, window, dirs, bundled_path):
    victim = write_model_gguf(dirs / "models" / "old.gguf", "qwen2.5-0.5b", "Q8_0")
    window.show_library()
    view = window.models_dock.library_view
    settle(qtbot, view)
    view.table.selectRow(rows(view)[bundled_path.name])
    assert not view.delete_button.isEnabled()
    view.delete_selected()
    assert view.confirm is None and bundled_path.is_file()
    view.table.selectRow(rows(view)["old.gguf"])
    assert view.delete_button.isEnabled()
    view.delete_button.click()
    assert view.confirm is not None and view.confirm.isVisible()
    view.confirm.button(QMessageBox.StandardButton.Cancel).click()
    assert victim.is_file()
    view.delete_button.click()
    view.confirm.button(QMessageBox.StandardButton.Yes).click()
    settle(qtbot, view)
    assert not victim.exists() and "old.gguf" not in rows(view)
    assert view.status.text().startswith("Deleted")


def test_load_from_the_library_lists_drafts_and_recent_models(qtbot, window, dirs, bundled_path):
    # The header-only draft cannot run, so speculative decoding stays off for this load.
    window.settings.draft = "none"
    draft = tiny_draft(dirs / "models" / "tiny-draft.gguf", bundled_path)
    write_model_gguf(dirs / "models" / "qwen7.gguf", "qwen2.5-7b", "Q4_K_M")  # another vocabulary: no draft
    window.show_library()
    view = window.models_dock.library_view
    settle(qtbot, view)
    view.table.selectRow(rows(view)[bundled_path.name])
    view.load_button.click()
    qtbot.waitUntil(lambda: not window.host.loading, timeout=60_000)
    assert window.host.ready, window.info.messages()
    assert window.settings.model == "bundled"
    qtbot.waitUntil(lambda: view.loaded_path == str(bundled_path), timeout=10_000)
    settle(qtbot, view)
    assert view.draft_paths() == [str(draft)]
    assert view.drafts.count() == 1 and "tiny-draft" in view.drafts.item(0).text()
    window.fill_recent()
    names = [a.text() for a in window.recent_menu.actions()]
    assert names == [bundled_path.name]
    assert view.table.item(rows(view)[bundled_path.name], lib_col("Last used")).text() != "never"
    view.unload_button.click()
    assert not window.host.ready and window.model_label.text() == "No model loaded"


def test_settings_offer_drafts_by_name_and_the_choice_reaches_engine_load(qtbot, window, dirs, bundled_path):
    from engine.sizing.load_plan import carry_out, plan_spec
    from app.core.settings import Settings, SettingsError
    from app.settings_ui.settings_dialog import SettingsDialog

    draft = tiny_draft(dirs / "models" / "tiny-draft.gguf", bundled_path)
    write_model_gguf(dirs / "models" / "qwen05.gguf", "qwen2.5-0.5b", "Q4_K_M")  # another vocabulary
    dlg = SettingsDialog(window.settings, window)
    qtbot.waitUntil(lambda: not dlg.draft_list.pending, timeout=30_000)  # the list is read off the GUI thread
    items = [(dlg.draft.itemText(i), dlg.draft.itemData(i)) for i in range(dlg.draft.count())]
    assert [d for _, d in items] == ["auto", "none", str(draft)] and "tiny-draft" in items[2][0]
    dlg.draft.setCurrentIndex(2)
    assert dlg.chosen_request().draft == str(draft)
    s = dlg.build()
    dlg.reject()
    assert s.draft == str(draft)
    req = s.load_spec()
    plan = plan_spec(req, HW8)
    assert plan.draft_source == str(draft)                    # the planner sizes the chosen draft
    assert carry_out(plan, req, req.model_ref(), "llama_cpp", n_threads=2, data_dir=None).draft == str(draft)
    # The window carries it to Engine.open: this header-only draft cannot run, and the load says so.
    window.apply_settings(s)
    qtbot.waitUntil(lambda: any("tiny-draft.gguf" in m for m in window.info.messages()), timeout=60_000)
    with pytest.raises(SettingsError, match="draft model's .gguf file"):
        Settings(draft=str(dirs / "missing.gguf")).validate()


def draft_items(box) -> list:
    return [box.itemData(i) for i in range(box.count())]


@pytest.fixture
def held_drafts(monkeypatch):
    """draft_choices held on an event per model, recording the thread each call ran on."""
    import threading

    from app.library import library_view

    calls, release = [], {}

    def held(model):
        calls.append((model, threading.get_ident()))
        release.setdefault(model, threading.Event()).wait(30)
        return [(f"draft for {model}", f"/drafts/{model}.gguf"), ("shared", "/drafts/shared.gguf")]

    monkeypatch.setattr(library_view, "draft_choices", held)
    return calls, lambda model: release.setdefault(model, threading.Event()).set()


def test_the_draft_list_arrives_from_the_background_and_keeps_the_choice(qtbot, held_drafts):
    import threading

    from PySide6.QtWidgets import QComboBox

    from app.settings_ui.draft_list import DraftList

    calls, release = held_drafts
    box, changed = QComboBox(), []
    drafts = DraftList(box, box, lambda: changed.append(drafts.chosen()))
    drafts.fill("a", "/drafts/shared.gguf")
    # At once, before any header is read: the choice is there, selected.
    assert draft_items(box) == ["auto", "none", "/drafts/shared.gguf"] and drafts.chosen() == "/drafts/shared.gguf"
    assert drafts.pending
    qtbot.waitUntil(lambda: bool(calls), timeout=10_000)
    assert calls[0][0] == "a" and calls[0][1] != threading.main_thread().ident
    drafts.fill("b", drafts.chosen())   # another model: a's list, when it comes, is out of date
    release("a")
    qtbot.waitUntil(lambda: len(calls) == 2, timeout=10_000)
    box.setCurrentIndex(box.findData("none"))  # the user picks meanwhile: that choice is kept
    release("b")
    qtbot.waitUntil(lambda: not drafts.pending, timeout=10_000)
    assert draft_items(box) == ["auto", "none", "/drafts/b.gguf", "/drafts/shared.gguf"]
    assert drafts.chosen() == "none" and changed == []
    # A choice the new model's list lacks falls back to Auto, and the dialog hears of it.
    box.setCurrentIndex(box.findData("/drafts/b.gguf"))
    drafts.fill("c", drafts.chosen())
    assert drafts.chosen() == "/drafts/b.gguf"
    release("c")
    qtbot.waitUntil(lambda: not drafts.pending, timeout=10_000)
    assert drafts.chosen() == "auto" and changed == ["auto"]


def test_a_draft_list_that_cannot_be_read_says_why(qtbot, monkeypatch):
    from PySide6.QtWidgets import QComboBox

    from app.library import library_view
    from app.settings_ui.draft_list import DraftList

    def broken(model):
        raise PermissionError("models folder: permission denied")

    monkeypatch.setattr(library_view, "draft_choices", broken)
    box, changed = QComboBox(), []
    drafts = DraftList(box, box, lambda: changed.append(drafts.chosen()))
    drafts.fill("bundled", "none")
    qtbot.waitUntil(lambda: not drafts.pending, timeout=10_000)
    assert draft_items(box)[:2] == ["auto", "none"] and drafts.chosen() == "none" and changed == []
    assert "Could not list the draft models on disk: PermissionError: models folder" in box.itemText(2)
    assert not box.model().item(2).isEnabled()


def test_settings_open_with_the_saved_draft_before_its_list_arrives(qtbot, window, held_drafts):
    from app.settings_ui.settings_dialog import SettingsDialog

    calls, release = held_drafts
    window.settings.draft = "/drafts/shared.gguf"
    dlg = SettingsDialog(window.settings, window)  # opens without waiting for the headers
    assert dlg.chosen_request().draft == "/drafts/shared.gguf" and dlg.draft_list.pending
    release("bundled")
    qtbot.waitUntil(lambda: not dlg.draft_list.pending, timeout=30_000)
    assert dlg.chosen_draft() == "/drafts/shared.gguf" and dlg.draft.currentText() == "shared"
    dlg.reject()


class _Opened(QObject):
    """Receives the URLs Qt would hand to the file manager (QDesktopServices.setUrlHandler)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url.toLocalFile())


def test_show_in_folder_and_the_recent_models_menu(qtbot, window, dirs, bundled_path):
    from PySide6.QtGui import QDesktopServices

    m = write_model_gguf(dirs / "models" / "qwen05.gguf", "qwen2.5-0.5b", "Q8_0")
    window.show_library()
    view = window.models_dock.library_view
    settle(qtbot, view)
    opened = _Opened()
    QDesktopServices.setUrlHandler("file", opened, "open")
    try:
        view.table.selectRow(rows(view)["qwen05.gguf"])
        view.folder_button.click()
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert opened.urls == [str(dirs / "models")]
    window.fill_recent()
    assert [a.text() for a in window.recent_menu.actions()] == ["(none yet)"]
    view.library.mark_used(m)
    window.fill_recent()
    (act,) = window.recent_menu.actions()
    assert act.text() == "qwen05.gguf"
    act.trigger()  # loads it through the settings, like the Settings dialog would
    assert window.settings.model == str(m) and window.settings.source == "gguf"


def test_the_hidden_library_reads_nothing_until_it_is_shown(qtbot, window, dirs, bundled_path):
    # A scan after each load, while the first reply streamed, stalled the event loop past its budget
    # for a table nobody was looking at: a hidden library waits until it is shown.
    view = window.models_dock.library_view
    scans = []
    real_scan = view.library.scan
    view.library.scan = lambda: scans.append(1) or real_scan()
    window.start()
    qtbot.waitUntil(lambda: not window.host.loading, timeout=60_000)
    assert window.host.ready, window.info.messages()
    assert view.loaded_path == str(bundled_path)  # the load was noted...
    assert scans == [] and view.scanning == 0      # ...and nothing was read for the hidden page
    window.show_library()
    settle(qtbot, view)
    assert scans == [1] and bundled_path.name in rows(view)
    assert view.table.item(rows(view)[bundled_path.name], 0).font().bold()  # the loaded one
    write_model_gguf(dirs / "models" / "qwen7.gguf", "qwen2.5-7b", "Q4_K_M")
    window.show_library()  # already open: read again (a file may have come since)
    settle(qtbot, view)
    assert len(scans) == 2 and "qwen7.gguf" in rows(view)
    window.models_dock.hide()
    (dirs / "models" / "qwen7.gguf").unlink()
    window.show_library()  # hidden, then shown: read again
    settle(qtbot, view)
    assert len(scans) == 3 and "qwen7.gguf" not in rows(view)


def test_a_library_that_cannot_be_read_says_why(qtbot, window):
    view = window.models_dock.library_view

    def unreadable():
        raise PermissionError("models folder: permission denied")

    view.library.scan = unreadable
    window.show_library()
    settle(qtbot, view)
    assert view.status.text() == "Could not read the models on disk: models folder: permission denied"
    assert view.models == [] and view.table.rowCount() == 0
    view.library.scan = lambda: 1 / 0  # a bug says so too, rather than leaving the page waiting
    view.refresh()
    settle(qtbot, view)
    assert view.status.text() == "Could not read the models on disk: ZeroDivisionError: division by zero"


def test_the_library_shows_a_model_s_own_settings(qtbot, window, dirs, bundled_path):
    from app.core.model_defaults import with_yours
    from gguf_copy import QWEN3_SAMPLING, with_metadata

    path = with_metadata(bundled_path, dirs / "models" / "qwen3-like.gguf", QWEN3_SAMPLING)
    window.show_library()
    view = window.models_dock.library_view
    settle(qtbot, view)
    tip = view.table.item(rows(view)["qwen3-like.gguf"], 0).toolTip()
    assert "its own settings: temperature 0.6 (the model's recommendation), top_k 20" in tip
    view.table.selectRow(rows(view)["qwen3-like.gguf"])
    view.load_button.click()
    qtbot.waitUntil(lambda: window.host.ready and window.host.identity.key is not None, timeout=60_000)
    window._adopt_settings(with_yours(window.settings, window.host.identity, {"max_tokens": 2048}))
    view.refresh()
    settle(qtbot, view)
    assert "max_tokens 2048 (yours for this model)" in view.table.item(rows(view)[path.name], 0).toolTip()

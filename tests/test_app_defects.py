"""Defects found in the window (issue #22), each in the real window (offscreen, real SQLite, real
loads of the bundled model): the context meter and the welcome page follow a model loaded later,
the library's Name column is readable at the dock's default width, and the Models dock's key
works right after the window is shown."""
from __future__ import annotations

import html
from dataclasses import replace

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtTest import QTest

from app.core.settings import Settings, SettingsFile
from app.library.library_view import COLUMNS
from app.window.main_window import MainWindow
from model_files import write_model_gguf


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HEARTH_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    (tmp_path / "models").mkdir()
    return tmp_path


def open_window(qtbot, settings: Settings | None = None, start: bool = True) -> MainWindow:
    s = settings or Settings()
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 8})
    SettingsFile().save(s)
    w = MainWindow()
    w.show()
    qtbot.waitExposed(w)
    if start:
        w.start()
        wait_loaded(qtbot, w)
    return w


def wait_loaded(qtbot, w: MainWindow) -> None:
    qtbot.waitUntil(lambda: w.host.ready or not w.host.loading, timeout=60_000)
    assert w.host.ready, w.info.messages()


def reply(qtbot, w: MainWindow, text: str) -> dict:
    w.chat.input.setPlainText(text)
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
    assert w.stream is not None, w.info.messages()
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    return w.store.messages(w.current)[-1].metrics


def test_the_context_meter_shows_the_size_of_a_model_loaded_after_the_last_reply(qtbot, dirs):
    w = open_window(qtbot, Settings(context=512))
    assert w.host.model.n_ctx == 512
    first = w.current
    m = reply(qtbot, w, "What is the capital of France?")
    used = m["prompt_tokens"] + m["generated_tokens"]
    assert w.context_label.text() == f"Context {used:,} / 512"
    w.apply_settings(replace(w.settings, context=2048))  # the same model again, with a larger context
    wait_loaded(qtbot, w)
    assert w.host.model.n_ctx == 2048
    assert w.context_label.text() == f"Context {used:,} / 2,048"  # at once, not at the next reply
    tip = w.context_label.toolTip()
    assert f"{used:,} tokens of the 512-token context it was written with" in tip
    assert "The model loaded now has a 2,048-token context" in tip
    w.new_conversation()
    assert w.context_label.text() == ""
    w.select_conversation(first)
    assert w.context_label.text() == f"Context {used:,} / 2,048"
    m2 = reply(qtbot, w, "And of Germany?")
    assert m2["n_ctx"] == 2048
    assert w.context_label.text() == f"Context {m2['prompt_tokens'] + m2['generated_tokens']:,} / 2,048"
    assert "written with" not in w.context_label.toolTip()
    w.close()


def test_the_welcome_names_the_model_loaded_not_the_bundled_one(qtbot, dirs, bundled_path):
    w = open_window(qtbot, start=False)
    body = w.chat.empty.body
    assert "SmolLM2-135M-Instruct" not in body.text()  # nothing has loaded yet: it names no model
    assert "The status bar shows the model once it has loaded" in body.text()
    w.start()
    wait_loaded(qtbot, w)
    assert "The bundled model, <b>SmolLM2-135M-Instruct</b>" in body.text()
    other = dirs / "models" / "Tiny <Test> & Co.Q4_1.gguf"  # another file (the same weights), an odd name
    other.symlink_to(bundled_path)
    w.apply_settings(replace(w.settings, model=str(other), source="gguf"))
    wait_loaded(qtbot, w)
    assert w.host.model.label == other.name and not w.host.model.bundled
    text = body.text()
    assert "SmolLM2-135M-Instruct" not in text and "bundled" not in text
    assert f"The model loaded now is <b>{html.escape(other.name)}</b>" in text  # shown as text, never markup
    assert "Settings → Model" in text and w.chat.empty.isVisibleTo(w)
    w.apply_settings(replace(w.settings, model="bundled", source="bundled"))
    wait_loaded(qtbot, w)
    assert "The bundled model, <b>SmolLM2-135M-Instruct</b>" in body.text()
    w.close()


def test_the_library_name_column_is_readable_at_the_docks_default_width(qtbot, dirs, bundled_path):
    write_model_gguf(dirs / "models" / "Qwen2.5-7B-Instruct-Q4_K_M.gguf", "qwen2.5-7b", "Q4_K_M")
    w = open_window(qtbot)  # the bundled model loads: it is marked used, so "Last used" holds a date
    w.act_library.trigger()
    view = w.models_dock.library_view
    qtbot.waitUntil(lambda: view.scanning == 0 and len(view.models) == 2, timeout=60_000)
    qtbot.waitUntil(lambda: all(view.badge_of(m.path) != "…" for m in view.models), timeout=60_000)
    t = view.table
    when = t.item(next(r for r, m in enumerate(view.models) if m.path == bundled_path), COLUMNS.index("Last used"))
    assert when.text() != "never"
    qtbot.wait(50)  # the header sizes its sections to their contents after the event loop runs
    widths = [t.columnWidth(c) for c in range(t.columnCount())]
    assert widths[0] >= max(widths[1:])
    names = [t.item(r, 0).text() for r in range(t.rowCount())]
    assert max(len(n) for n in names) >= 20  # a typical model's name, e.g. the bundled one's
    assert widths[0] >= t.sizeHintForColumn(0)  # every name shows in full, none elided
    assert widths[0] >= t.fontMetrics().horizontalAdvance("x" * 20)
    w.close()


def test_the_models_dock_key_works_right_after_the_window_is_shown(qtbot, dirs):
    SettingsFile().save(Settings())  # not open_window: nothing may run the event loop before the key
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    # No click and no event loop yet: the window system has not made the window active.
    assert not w.isActiveWindow() and not w.models_dock.isVisible()
    QTest.keySequence(w, QKeySequence("Ctrl+Shift+M"))
    assert w.models_dock.isVisible()
    assert w.chat.input_text() == ""  # the key did not type into the box
    qtbot.waitUntil(w.isActiveWindow)  # and the window asked to be activated when shown
    assert w.focusWidget() is w.chat.input
    before = len(w.store.list_conversations())
    QTest.keyClick(w.chat.input, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)  # once active: Qt's own way
    assert len(w.store.list_conversations()) == before + 1  # exactly once, not twice
    w.close()


def test_a_window_key_pressed_in_the_input_box_before_activation_works_too(qtbot, dirs):
    SettingsFile().save(Settings())
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    assert not w.isActiveWindow()
    before = len(w.store.list_conversations())
    QTest.keyClick(w.chat.input, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert len(w.store.list_conversations()) == before + 1
    QTest.keyClick(w.chat.input, Qt.Key.Key_A)  # a plain key still types
    assert w.chat.input_text() == "a"
    w.close()

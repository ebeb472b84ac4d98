"""Every shortcut in the table, pressed on the real window (offscreen, real SQLite, the
bundled model where a reply is needed); the Help sheet lists exactly the table."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtTest import QTest

from app.window.main_window import MainWindow
from app.window.selftest import write_settings
from app.ui.shortcuts import SHORTCUTS, ShortcutsSheet, shown_keys

C, S = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    write_settings(max_tokens=400)
    w = MainWindow()
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()


def press(w, key, mods=Qt.KeyboardModifier.NoModifier, target=None) -> None:
    target = target or QGuiApplication.focusObject() or w
    QTest.keyClick(target, key, mods)


def bound_keys(w) -> set[str]:
    return {k.toString() for a in w.findChildren(QAction) for k in a.shortcuts() if a.isEnabled()}


def test_the_sheet_lists_the_table_and_every_key_in_it_is_bound(qtbot, window):
    sheet = window.show_shortcuts()
    assert isinstance(sheet, ShortcutsSheet) and sheet.isVisible()
    assert sheet.rows() == [(shown_keys(s), s.what) for s in SHORTCUTS]
    bound = bound_keys(window)
    for s in SHORTCUTS:
        if s.where not in ("input", "held"):  # Up is the input box's own key, F8 held the voice's (they ask)
            assert {QKeySequence(k).toString() for k in s.keys} <= bound, s.name
    sheet.close()
    press(window, Qt.Key.Key_F1, target=window.chat.input)
    assert window.shortcuts_sheet.isVisible() and window.shortcuts_sheet is not sheet
    window.shortcuts_sheet.close()


def test_chat_switching_search_zoom_and_delete_with_undo(qtbot, window):
    w = window
    first = w.current
    w.new_conversation()
    second = w.current
    w.new_conversation()
    third = w.current
    assert w.conversations.ids() == [third, second, first]
    w.chat.input.setFocus()
    press(w, Qt.Key.Key_Tab, C)
    assert w.current == second
    press(w, Qt.Key.Key_Tab, C)
    press(w, Qt.Key.Key_Tab, C)
    assert w.current == third  # round the end of the list
    press(w, Qt.Key.Key_Backtab, C | S)  # what Ctrl+Shift+Tab sends
    assert w.current == first

    press(w, Qt.Key.Key_F, C)
    assert w.conversations.search.hasFocus()

    size = w.chat.font().pointSizeF()
    w.chat.input.setFocus()
    press(w, Qt.Key.Key_Plus, C)
    press(w, Qt.Key.Key_Equal, C)
    assert w.chat.font().pointSizeF() == size + 2
    press(w, Qt.Key.Key_Minus, C)
    assert w.chat.font().pointSizeF() == size + 1
    press(w, Qt.Key.Key_0, C)
    assert w.chat.font().pointSizeF() == size

    w.select_conversation(second)
    w.conversations.search.setFocus()
    w.conversations.search.setText("abc")
    w.conversations.search.setCursorPosition(0)
    press(w, Qt.Key.Key_Delete, target=w.conversations.search)  # Delete in the search box edits text
    assert w.conversations.search.text() == "bc"
    assert second in [c.id for c in w.store.list_conversations()]
    w.conversations.search.clear()
    w.conversations.list.setFocus()
    press(w, Qt.Key.Key_Delete, target=w.conversations.list)
    assert second not in w.conversations.ids()
    bar = next(b for b in w.info.bars() if "Deleted" in b.text())
    bar.action_button.click()  # Undo
    assert second in w.conversations.ids() and w.current == second


def test_reply_keys_copy_up_to_edit_and_esc_to_stop(qtbot, window):
    w = window
    w.start()
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
    w.chat.input.setFocus()
    press(w, Qt.Key.Key_C, C | S)
    assert "no reply" in w.statusBar().currentMessage()
    w.chat.input.setPlainText("Write a long story about a dragon.")
    press(w, Qt.Key.Key_Return, target=w.chat.input)
    assert w.stream is not None
    qtbot.waitUntil(lambda: len("".join(w.stream.parts)) > 20 if w.stream else True, timeout=60_000)
    press(w, Qt.Key.Key_Escape, target=w.chat.input)  # Esc stops the reply
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    reply = w.store.messages(w.current)[-1]
    assert reply.finish_reason == "cancelled" and reply.content

    QGuiApplication.clipboard().setText("")
    press(w, Qt.Key.Key_C, C | S, target=w.chat.input)
    assert QGuiApplication.clipboard().text() == reply.content

    w.chat.input.setPlainText("not empty")
    press(w, Qt.Key.Key_Up, target=w.chat.input)
    assert w.chat.editing is None  # Up moves the cursor in a box with text
    w.chat.input.clear()
    press(w, Qt.Key.Key_Up, target=w.chat.input)
    user = w.store.messages(w.current)[0]
    assert w.chat.editing == user.id and w.chat.input_text() == user.content
    press(w, Qt.Key.Key_Escape, target=w.chat.input)  # Esc cancels the edit, and nothing is stopped
    assert w.chat.editing is None and w.chat.input_text() == ""

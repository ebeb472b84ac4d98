"""A chat that outgrows the context, in the real window (offscreen, bundled model, real SQLite):
pinning a message, compaction's summary (stored, shown folded, editable, surviving a restart), the
divider and the meter, "stop" with one click to go on, and no message the user wrote ever deleted
by any policy, checked through a restart."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QPushButton

from app.core.settings import Settings, SettingsFile
from app.window.main_window import MainWindow
from engine.prompt.summary import summary_text

TURN = "The baker kneads the dough, shapes the loaf and waits for it to rise. " * 2  # ~34 tokens
SHORT = "What is the capital of France?"


@pytest.fixture
def make_window(qtbot, data_dir):
    """make_window(settings) -> a shown MainWindow with the model loaded (a restart: a new one, same folder)."""
    made: list[MainWindow] = []

    def make(settings: Settings | None = None) -> MainWindow:
        if settings is not None:
            settings.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 16})
            SettingsFile().save(settings)
        w = MainWindow()
        made.append(w)
        w.show()
        w.start()
        qtbot.waitUntil(lambda: w.host.ready or not w.host.loading, timeout=60_000)
        assert w.host.ready, w.info.messages()
        return w

    yield make
    for w in made:
        w.close()


def type_and_enter(qtbot, w: MainWindow, text: str) -> None:
    w.chat.input.setPlainText(text)
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.stream is None, timeout=180_000)


def long_chat(w: MainWindow, turns: int = 8) -> int:
    cid = w.current
    for i in range(turns):
        w.store.add_message(cid, "user" if i % 2 == 0 else "assistant", f"Turn {i}. {TURN}")
    w.current = None
    w.select_conversation(cid)
    return cid


def written(w: MainWindow, cid: int) -> list[tuple[int, str]]:
    """Every message of the conversation as the user sees it: (id, text)."""
    return [(m.id, m.content) for m in w.store.messages(cid)]


def test_a_summary_is_kept_shown_edited_and_survives_a_restart(qtbot, make_window):
    w = make_window(Settings(context=256, context_policy="compact"))
    cid = long_chat(w)
    pinned = w.store.messages(cid)[2]
    w.chat.widget(pinned.id).btn_pin.click()  # "Turn 2": the model keeps it, however long the chat
    assert w.store.message(pinned.id).pinned and w.chat.widget(pinned.id).btn_pin.text() == "Pinned"
    seen: list[str] = []
    w.host.progress.connect(lambda _mid, p: seen.append(w.stats_label.text()) if p.get("compacting") else None)
    type_and_enter(qtbot, w, SHORT)
    assert "Summarizing the oldest messages to fit the context…" in seen
    msgs = w.store.messages(cid)
    assert len(msgs) == 10 and msgs[-1].content  # the turn and its reply; the summary is no message
    m = msgs[-1].metrics
    assert m["context_policy"] == "compact" and m["summarized_messages"] > 0 and "summary" not in m
    [summary] = w.store.summaries(cid)
    assert summary.text and summary.text == summary.written and summary.covers > 2
    block, divider = w.chat.summary_block, w.chat.context_marker
    assert block.isVisibleTo(w) and divider.isVisibleTo(w)
    assert f"Summary of {summary.covers} earlier messages" in block.title.text()
    assert "reads the summary below instead of the" in divider.text()
    lay, after = w.chat._list, w.chat.widget(msgs[msgs.index(w.store.message(summary.upto_id)) + 1].id)
    assert lay.indexOf(divider) + 1 == lay.indexOf(block) == lay.indexOf(after) - 1
    assert f"· {m['summarized_messages']} summarized" in w.context_label.text()
    assert "summarized" in w.chat.widget(msgs[-1].id).details.text()  # Details say which policy acted

    history = w.replies.history(cid, "")
    assert [summary_text(x) for x in history if summary_text(x)] == [summary.text]
    assert any(x.pinned and x.content == pinned.content for x in history)  # pinned: never summarized

    block.toggle.click()
    assert block.body.text() == summary.text  # unfolded: all of it
    block.edit_button.click()
    block.editor.setPlainText("")
    block.save_button.click()
    assert block.problem.isVisibleTo(w) and w.store.summaries(cid)[0].text == summary.text  # refused, kept
    block.editor.setPlainText("The user talked about baking bread.")
    block.save_button.click()
    [edited] = w.store.summaries(cid)
    assert edited.text == "The user talked about baking bread." and edited.written == summary.text
    assert "edited by you" in block.title.text()
    assert [summary_text(x) for x in w.replies.history(cid, "") if summary_text(x)] == [edited.text]
    before = written(w, cid)
    w.close()

    again = make_window()  # a restart: the same data folder, the same settings
    again.select_conversation(cid)
    assert written(again, cid) == before
    assert again.chat.summary_block.isVisibleTo(again) and "edited by you" in again.chat.summary_block.title.text()
    assert again.chat.widget(pinned.id).btn_pin.isChecked()
    type_and_enter(qtbot, again, "And of Germany?")  # the next reply reads the edited summary, writes none
    last = again.store.messages(cid)[-1]
    assert last.content and last.metrics["summarized_messages"] == 0 and len(again.store.summaries(cid)) == 1
    assert written(again, cid)[:10] == before


def test_stop_refuses_and_one_click_goes_on_under_another_policy(qtbot, make_window):
    w = make_window(Settings(context=256, context_policy="stop", exactness="fast"))  # fast: the profile that shifts
    cid = long_chat(w)
    before = written(w, cid)
    type_and_enter(qtbot, w, SHORT)
    assert written(w, cid) == before and w.chat.input_text() == SHORT
    bar = w.info._bars[-1]
    assert "not sent" in bar.text() and "the context holds 256" in bar.text()
    buttons = {b.text(): b for b in bar.findChildren(QPushButton)}
    assert set(buttons) >= {"Summarize the oldest and send", "Shift and send", "Drop the oldest and send"}
    buttons["Shift and send"].click()
    qtbot.waitUntil(lambda: w.stream is None and len(w.store.messages(cid)) == 10, timeout=180_000)
    reply = w.store.messages(cid)[-1]
    assert reply.content and reply.metrics["context_policy"] == "shift" and reply.metrics["dropped_messages"] > 0
    assert w.store.conversation(cid).context_policy == "shift" and w.chat.input_text() == ""
    assert "This chat shifts its oldest messages out" in w.context_label.toolTip()
    assert written(w, cid)[:8] == before


@pytest.mark.parametrize("policy", ["drop_oldest", "shift", "compact"])
def test_no_message_is_ever_deleted_by_any_policy(qtbot, make_window, policy):
    w = make_window(Settings(context=256, context_policy=policy, exactness="fast"))
    cid = long_chat(w)
    for text in (SHORT, "And of Germany?", "And of Spain?"):
        type_and_enter(qtbot, w, text)
    msgs = written(w, cid)
    assert len(msgs) == 14 and [t for _i, t in msgs[8::2]] == [SHORT, "And of Germany?", "And of Spain?"]
    assert w.store.messages(cid)[-1].metrics["context_policy"] in (policy, "", "compact")
    w.close()
    again = make_window()
    again.select_conversation(cid)
    assert written(again, cid) == msgs
    shown = [again.chat.widget(i) for i, _t in msgs]
    assert all(x is not None for x in shown)  # every one still on screen

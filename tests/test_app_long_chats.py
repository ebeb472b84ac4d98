"""Long prompts and long chats in the real window (offscreen, bundled model, real SQLite):
reading progress and Stop during a prefill, the context meter, the marker where turns
were left out, the context-policy setting, and a replaced engine being freed."""
from __future__ import annotations

import gc
import json
import time
import weakref

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.window.main_window import MainWindow
from app.core.context_meter import context_cut, context_use
from app.window.selftest import write_settings
from app.core.settings import Settings, SettingsFile
from app.core.store import StoredMessage

SHORT = "What is the capital of France?"
# About 1,500 tokens: six prefill chunks, so Stop lands while the prompt is read.
LONG_SYSTEM = " ".join(f"Rule {i}: when the user asks about subject number {i}, answer kindly and briefly."
                       for i in range(1, 73))
TURN = "The baker kneads the dough, shapes the loaf and waits for it to rise. " * 2  # ~34 tokens


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def make_window(qtbot, data_dir):
    """make_window(settings=None, **sampling) -> a shown MainWindow with the model loaded."""
    made: list[MainWindow] = []

    def make(settings: Settings | None = None, **sampling) -> MainWindow:
        if settings is None:
            write_settings(**{"max_tokens": 16, **sampling})
        else:
            settings.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 16, **sampling})
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


def type_and_enter(w: MainWindow, text: str) -> None:
    w.chat.input.setPlainText(text)
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)


def wait_reply(qtbot, w: MainWindow, timeout: int = 60_000) -> None:
    qtbot.waitUntil(lambda: w.stream is None, timeout=timeout)


def long_chat(w: MainWindow, turns: int = 8) -> int:
    """A conversation of ``turns`` stored messages (user and reply by turns), on screen."""
    cid = w.current
    for i in range(turns):
        w.store.add_message(cid, "user" if i % 2 == 0 else "assistant", f"Turn {i}. {TURN}")
    w.current = None
    w.select_conversation(cid)
    return cid


def msg(mid: int, role: str, content: str, metrics: dict | None = None) -> StoredMessage:
    return StoredMessage(mid, 1, role, content, True, "eos", None, metrics, 0.0)


# -- the marker and the meter, on hand-written conversations ---------------------


def test_context_cut_finds_the_first_message_the_model_still_saw():
    u, a = "user", "assistant"
    plain = [msg(1, u, "a"), msg(2, a, "b"), msg(3, u, "c"), msg(4, a, "d"), msg(5, u, "e"),
             msg(6, a, "f", {"dropped_messages": 2})]
    assert context_cut(plain) == (3, 2)
    # An empty reply (stopped before any text) is not in the prompt, and the two user
    # turns around it reach the engine as one: it counted 2 messages, the chat shows 4.
    merged = [msg(1, u, "a"), msg(2, a, ""), msg(3, u, "b"), msg(4, a, "c"), msg(5, u, "d"),
              msg(6, a, "e", {"dropped_messages": 2})]
    assert context_cut(merged) == (5, 4)
    # The latest reply with metrics decides; nothing left out means no marker.
    assert context_cut(plain[:4] + [msg(5, u, "e"), msg(6, a, "f", {"dropped_messages": 0})]) is None
    assert context_cut(plain[:5] + [msg(6, a, "", None)]) is None  # still streaming, no metrics
    assert context_cut(plain + [msg(7, u, "g"), msg(8, a, "h", {"dropped_messages": 4})]) == (5, 4)
    assert context_cut([msg(1, a, "x", {"n_ctx": 256})]) is None  # written before the field existed


def test_context_use_says_how_full_the_context_was():
    text, tip = context_use({"prompt_tokens": 1200, "generated_tokens": 34, "n_ctx": 8192, "dropped_messages": 0})
    assert text == "Context 1,234 / 8,192"
    assert "1,234 of the model's 8,192-token context" in tip and "oldest messages are dropped in steps" in tip
    text, tip = context_use({"prompt_tokens": 100, "generated_tokens": 16, "n_ctx": 256, "dropped_messages": 6})
    assert text == "Context 116 / 256 · 6 left out" and "its 6 oldest messages were left out" in tip
    text, tip = context_use({"prompt_tokens": 100, "generated_tokens": 16, "n_ctx": 256, "dropped_messages": 6,
                             "context_policy": "shift", "shifted_tokens": 90})
    assert "moved in the KV cache (90 tokens) instead of read again" in tip
    text, tip = context_use({"prompt_tokens": 100, "generated_tokens": 16, "n_ctx": 256, "summarized_messages": 9,
                             "context_policy": "compact", "context_ms": 2500.0})
    assert text == "Context 116 / 256 · 9 summarized" and "summarized its 9 oldest messages (2.5 s)" in tip
    assert context_use(None) == ("", "") and context_use({"prompt_tokens": 3}) == ("", "")


# -- the setting -----------------------------------------------------------------


def test_the_context_policy_setting_is_read_written_and_checked(data_dir):
    f = SettingsFile()
    old = Settings(theme="dark").to_dict()
    del old["context_policy"]  # a file written before the setting existed
    f.path.write_text(json.dumps(old))
    s, notice = f.load()
    assert notice is None and s.context_policy == "drop_oldest" and s.theme == "dark"
    f.save(Settings(context_policy="stop"))
    assert f.load()[0].context_policy == "stop"
    bad = {**Settings(context=2048).to_dict(), "context_policy": "sometimes"}
    f.path.write_text(json.dumps(bad))
    s, notice = f.load()
    assert s.context_policy == "drop_oldest" and s.context == 2048
    assert "context_policy: must be one of stop, drop_oldest, shift, compact" in notice


def test_the_sampling_tab_edits_the_context_policy(qtbot, data_dir):
    from app.settings_ui.settings_dialog import SettingsDialog

    dlg = SettingsDialog(Settings(context_policy="stop"))
    qtbot.addWidget(dlg)
    form = dlg.sampling_form
    assert form.policy.currentText() == "Stop and say so" and dlg.build().context_policy == "stop"
    form.policy.setCurrentIndex(form.policy.findData("drop_oldest"))
    assert form.policy.currentText() == "Drop the oldest messages in steps (keep the system prompt and pinned ones)"
    assert dlg.build().context_policy == "drop_oldest"
    form.policy.setCurrentIndex(form.policy.findData("stop"))
    form.reset()
    assert form.context_policy() == "drop_oldest"


# -- the window ------------------------------------------------------------------


def test_a_long_prompt_shows_reading_progress_and_stop_works_while_it_is_read(qtbot, make_window, bundled_path):
    from engine import Engine
    from engine.config import EngineConfig

    w = make_window()
    cid = w.current
    w.chat.system.toggle.setChecked(True)
    w.chat.system.editor.setPlainText(LONG_SYSTEM)
    seen: dict = {}

    def on_progress(mid, p):  # runs on the window thread, after the window's own handler
        if "prompt_total" in p and not seen:
            seen.update(status=w.stats_label.text(), note=w.chat.widget(mid).note.text(), p=dict(p))
            w.chat.input.setPlainText("typed while it reads")
            seen["t"] = time.perf_counter()
            w.chat.stop_button.click()

    w.host.progress.connect(on_progress)
    type_and_enter(w, "Which rule is about subject number 7?")
    mid = w.stream.mid
    wait_reply(qtbot, w, timeout=180_000)
    stopped_after = time.perf_counter() - seen["t"]
    assert seen["p"]["prompt_total"] > 1400 and 0 < seen["p"]["prompt_done"] < seen["p"]["prompt_total"]
    percent = 100 * seen["p"]["prompt_done"] // seen["p"]["prompt_total"]
    assert seen["note"] == f"Reading the prompt… {percent}%"
    assert seen["status"].startswith(f"Reading the prompt… {percent}% (")
    assert stopped_after < 2.0  # between prefill chunks, not after the whole prompt and a reply
    stored = w.store.message(mid)
    assert (stored.finish_reason, stored.content, stored.complete) == ("cancelled", "", False)
    assert "Stopped" in w.chat.widget(mid).note.text()
    assert [m.role for m in w.store.messages(cid)] == ["user", "assistant"]  # the sent message stays
    assert w.chat.input_text() == "typed while it reads"  # and so does what was typed meanwhile

    w.host.progress.disconnect(on_progress)
    type_and_enter(w, SHORT)  # the next send works, on the KV the stopped prefill left
    second = w.stream.mid
    wait_reply(qtbot, w, timeout=180_000)  # ~1,500 prompt tokens on one busy CPU core
    reply = w.store.message(second)
    assert reply.finish_reason in ("eos", "max_tokens") and reply.content
    assert reply.metrics["prompt_tokens"] > 1400
    *history, last = w.replies.history(cid, w.store.conversation(cid).system_prompt)
    assert [m.role for m in history] == ["system", "user", "user"] and last.content == reply.content
    fresh = Engine.open(EngineConfig(bundled_path, n_ctx=w.host.model.n_ctx, n_threads=w.host.model.local.n_threads))
    try:
        final = [ev for ev in fresh.stream(history, w.settings.sampling_params()) if ev.kind != "delta"][-1]
    finally:
        fresh.close()
    assert reply.content == final.text  # the same reply as a fresh engine's


def test_the_context_meter_shows_the_last_replys_use(qtbot, make_window):
    w = make_window()
    first = w.current
    assert w.context_label.text() == ""  # no reply yet
    type_and_enter(w, SHORT)
    wait_reply(qtbot, w)
    m = w.store.messages(first)[-1].metrics
    assert m["n_ctx"] == w.host.model.n_ctx
    used = m["prompt_tokens"] + m["generated_tokens"]
    assert w.context_label.text() == f"Context {used:,} / {m['n_ctx']:,}"
    assert f"{used:,} of the model's {m['n_ctx']:,}-token context" in w.context_label.toolTip()
    type_and_enter(w, "And of Germany?")
    wait_reply(qtbot, w)
    m2 = w.store.messages(first)[-1].metrics
    assert m2["prompt_tokens"] > used
    assert w.context_label.text() == f"Context {m2['prompt_tokens'] + m2['generated_tokens']:,} / {m2['n_ctx']:,}"
    after = w.context_label.text()
    w.new_conversation()
    assert w.context_label.text() == ""  # the meter follows the conversation on screen
    w.select_conversation(first)
    assert w.context_label.text() == after


def test_a_chat_longer_than_the_context_goes_on_and_marks_the_cut(qtbot, make_window):
    w = make_window(Settings(context=256))
    cid = long_chat(w)  # ~330 tokens: more than the model can see
    assert not w.chat.context_marker.isVisibleTo(w)
    type_and_enter(w, SHORT)
    wait_reply(qtbot, w)
    msgs = w.store.messages(cid)
    assert len(msgs) == 10  # the turn and its reply: nothing else is stored for the cut
    reply = msgs[-1]
    assert reply.finish_reason in ("eos", "max_tokens") and reply.content and not reply.error
    dropped = reply.metrics["dropped_messages"]
    assert 0 < dropped < 8 and msgs[dropped].role == "user"
    marker = w.chat.context_marker
    assert marker.isVisibleTo(w)
    assert marker.text() == f"— {dropped} earlier messages are outside the model's context —"
    lay = w.chat._list
    assert lay.indexOf(marker) == lay.indexOf(w.chat.widget(msgs[dropped].id)) - 1
    used = reply.metrics["prompt_tokens"] + reply.metrics["generated_tokens"]
    assert w.context_label.text() == f"Context {used:,} / 256 · {dropped} left out"
    assert f"its {dropped} oldest messages were left out" in w.context_label.toolTip()
    assert reply.metrics["view_from"] == msgs[dropped].id  # the first message the model saw, by its stored id

    w.new_conversation()
    assert not w.chat.context_marker.isVisibleTo(w)
    w.select_conversation(cid)  # derived from the stored metrics, so it comes back
    assert marker.isVisibleTo(w) and lay.indexOf(marker) == lay.indexOf(w.chat.widget(msgs[dropped].id)) - 1

    type_and_enter(w, "And of Germany?")  # the chat goes on after the cut, reusing its KV
    wait_reply(qtbot, w)
    nxt = w.store.messages(cid)[-1]
    assert nxt.content and nxt.metrics["dropped_messages"] >= dropped and nxt.metrics["cached_tokens"] > 0
    assert marker.isVisibleTo(w)


def test_the_stop_policy_refuses_the_send_and_keeps_the_text(qtbot, make_window):
    w = make_window(Settings(context=256, context_policy="stop"))
    cid = long_chat(w)
    before = [m.id for m in w.store.messages(cid)]
    type_and_enter(w, SHORT)
    wait_reply(qtbot, w)
    msgs = " ".join(w.info.messages())
    assert "not sent" in msgs and "the context holds 256" in msgs
    assert w.chat.input_text() == SHORT  # the typed message is back in the input box
    assert [m.id for m in w.store.messages(cid)] == before
    assert w.store.conversation(cid).draft == SHORT


def test_a_replaced_engine_is_freed(qtbot, make_window):
    w = make_window()
    type_and_enter(w, SHORT)
    wait_reply(qtbot, w)
    old = w.host._shared.engine
    old.self_reference = old  # a reference cycle: only the cyclic GC can free it
    ref = weakref.ref(old)
    del old
    w.apply_settings(Settings(**{**w.settings.to_dict(), "context": 1024}))  # a model change
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
    assert w.host.model.n_ctx == 1024 and w.host._shared.engine is not ref()
    gc.collect()
    assert ref() is None  # a frozen cycle would stay in memory for good
    assert gc.get_freeze_count() > 0  # what is alive stays out of the collector's way
    type_and_enter(w, SHORT)  # and the new model replies
    wait_reply(qtbot, w)
    assert w.store.messages(w.current)[-1].content


# -- opening long chats: only about a screenful is built ----------------------------


def test_a_1000_message_chat_builds_only_a_screenful_and_more_on_scrolling_up(qtbot, data_dir):
    from app.chat.chat_view import BATCH

    w = MainWindow()
    w.show()
    cid = w.current
    with w.store._tx() as c:  # one transaction: 1,000 commits would take minutes with synchronous=FULL
        for i in range(1000):
            w.store._insert(c, cid, "user" if i % 2 == 0 else "assistant", f"Turn {i}. {TURN}", True,
                            c.execute("SELECT leaf_id FROM conversations WHERE id = ?", (cid,)).fetchone()[0])
    w.current = None
    w.select_conversation(cid)
    built = w.chat.message_widgets()
    assert len(built) == BATCH <= 25 and w.chat.pending_count() == 1000 - BATCH
    assert built[-1].text.startswith("Turn 999.")
    bar = w.chat.scroll.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum())  # at the newest message
    assert built[-1].btn_regen.isVisibleTo(w)
    bar.setValue(0)  # the user scrolls to the top: the next batch is built above
    assert len(w.chat.message_widgets()) == 2 * BATCH
    qtbot.waitUntil(lambda: bar.value() > 0)  # the message that was on top stays in view
    old = w.store.messages(cid)[3].id
    assert w.chat.ensure_built(old) is not None and w.chat.pending_count() == 3
    assert [m.mid for m in w.chat.message_widgets()] == [m.id for m in w.store.messages(cid)[3:]]
    w.close()


def test_the_input_box_grows_with_its_text_up_to_a_limit(qtbot, data_dir):
    w = MainWindow()
    w.show()
    box = w.chat.input
    start = box.height()
    assert box.lines_shown() == box.MIN_LINES
    box.setPlainText("\n".join(f"line {i}" for i in range(5)))
    assert box.lines_shown() == 5 and box.height() > start
    box.setPlainText("\n".join(f"line {i}" for i in range(40)))
    assert box.lines_shown() == box.MAX_LINES
    tallest = box.height()
    box.setPlainText("\n".join(f"line {i}" for i in range(80)))
    assert box.height() == tallest  # it stops growing and scrolls instead
    box.clear()
    assert box.height() == start
    w.close()


def test_the_open_benchmark_measures_what_it_says(qtbot, data_dir, llama_backend):
    from app.window import bench_open

    reply = bench_open.long_reply()
    assert 9_000 <= len(llama_backend.tokenize(reply)) <= 12_000  # "a 10k-token reply", by the real tokenizer
    result = bench_open.run(repeats=1)
    assert result["widgets_built"] == {"10 messages (reference)": 10, "1,000 messages": 20,
                                       "one 10k-token reply": 2}
    assert set(result["seconds"]) == set(result["widgets_built"])

"""A thinking model's reply in the real window: the reasoning block, the Think control, search.

The bundled model cannot think, so most tests give the real window, worker and store a
reply as a script of real StreamEvents of the engine's kinds ("reasoning", "delta",
"final"), on the engine thread, in place of the loaded engine's stream (``Scripted``).
The Think control's tests put a real thinking template (Qwen3's) on the bundled model.
"""
from __future__ import annotations

import sqlite3
import threading

import pytest
from PySide6.QtGui import QGuiApplication, QTextFormat

from engine.decode.metrics import GenerationStats
from engine.types import StreamEvent

from app.bridge.generation_runner import FLUSH_DELTAS
from app.chat.message_widget import MessageWidget
from app.chat.reasoning_block import thought_line
from app.core.settings import Settings, SettingsError
from app.core.store import Store
from app.ui.theme import BUBBLES
from app.window.main_window import MainWindow
from test_app_render import _value, dump
from test_app_window import type_and_enter, wait_reply

REASONING = ["The user ", "greets me. ", "I should greet ", "them back, briefly."]
ANSWER = ["Hello", "! How can I ", "help you **today**?\n\n", "- one\n- two\n"]


def final(answer: str, reasoning: str | None, *, finish: str = "eos", open_: bool = False,
          ms: float = 12_345.0, tokens: int = 412) -> StreamEvent:
    stats = GenerationStats(generated_tokens=20, finish_reason=finish, reasoning_ms=ms if reasoning else 0.0,
                            reasoning_tokens=tokens if reasoning else 0)
    return StreamEvent("final", answer, finish_reason=finish, stats=stats, reasoning=reasoning,
                       reasoning_open=open_)


class Scripted:
    """The loaded engine, whose next reply is ``script``: StreamEvents, and threading.Events to wait on."""

    def __init__(self, real, script: list) -> None:
        self.real, self.script, self.calls = real, script, []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def stream(self, messages, params, **kwargs):
        self.calls.append((messages, kwargs))
        for step in self.script:
            if isinstance(step, threading.Event):
                assert step.wait(30)
            else:
                yield step


@pytest.fixture
def window(make_window):
    return make_window  # 24-token greedy replies on the bundled model, data in tmp_path


def script(w: MainWindow, steps: list) -> Scripted:
    s = Scripted(w.host.shared.engine, steps)
    w.host.shared.engine = s  # set while no reply runs; the worker reads it on the engine thread
    return s


def test_reasoning_streams_live_then_folds_and_the_answer_is_a_full_render(qtbot, window):
    w = window()
    answer_go, final_go = threading.Event(), threading.Event()
    many = [f"step {i}. " for i in range(FLUSH_DELTAS)]  # enough for one partial write to the store
    ev = [StreamEvent("reasoning", t) for t in REASONING + many]
    script(w, [*ev, answer_go, *[StreamEvent("delta", t) for t in ANSWER], final_go,
               final("".join(ANSWER), "".join(REASONING + many))])
    type_and_enter(w, "Hi!")
    mid = w.stream.mid
    r = w.chat.widget(mid)
    block = r.thinking
    qtbot.waitUntil(lambda: block.text == "".join(REASONING + many))
    assert block.isVisible() and block.expanded and block.view.isVisible()
    assert block.toggle.text() == "▾ Thinking…" and r.text == "" and r.note.text() == "Thinking…"
    # the throttled partial write keeps the reasoning apart from the (still empty) answer
    qtbot.waitUntil(lambda: (w.store.message(mid).reasoning or "").startswith("".join(REASONING)))
    assert w.store.message(mid).content == ""

    answer_go.set()
    qtbot.waitUntil(lambda: r.text == "".join(ANSWER))
    assert not block.expanded and not block.view.isVisible() and r.note.text() == "Writing…"
    assert block.toggle.text().startswith("▸ Thought for ")  # folded as soon as the answer began
    final_go.set()
    wait_reply(qtbot, w)
    assert block.toggle.text() == "▸ Thought for 12.3 s · 412 tokens" and not block.view.isVisible()
    m = w.store.message(mid)
    assert (m.content, m.reasoning, m.reasoning_open, m.reasoning_tokens) == (
        "".join(ANSWER), "".join(REASONING + many), False, 412)

    block.toggle.click()  # opens ...
    assert block.view.isVisible() and block.toggle.text() == "▾ Thought for 12.3 s · 412 tokens"
    assert block.text == m.reasoning
    block.toggle.click()  # ... and closes
    assert not block.view.isVisible()

    # the answer ends identical to the same answer rendered at once, the block apart from it
    fresh = MessageWidget(2, "assistant", "".join(ANSWER), colors=w.chat.colors)
    qtbot.addWidget(fresh)
    assert r.rendered_text() == fresh.rendered_text() and "greets" not in r.rendered_text()
    for a, b in zip(r.segments, fresh.segments, strict=True):
        assert shown(a) == shown(b)

    r.btn_copy.click()  # Copy is the answer only
    assert QGuiApplication.clipboard().text() == "".join(ANSWER)

    # Regenerate writes the answer again: a reply with no reasoning has no block
    script(w, [StreamEvent("delta", "Hi again."), final("Hi again.", None)])
    r.btn_regen.click()
    new_mid = w.stream.mid
    wait_reply(qtbot, w)
    again = w.chat.widget(new_mid)
    assert again.text == "Hi again." and again.thinking.isHidden()
    assert w.store.message(new_mid).reasoning is None
    # the regenerated reply was given the conversation without the old reply (answer or reasoning)
    assert [(m.role, m.content, m.reasoning) for m in w.host.shared.engine.calls[-1][0]] == [
        ("user", "Hi!", None)]


def test_a_reply_cut_inside_its_reasoning_is_kept_unfinished_across_a_restart(qtbot, window):
    w = window()
    script(w, [*[StreamEvent("reasoning", t) for t in REASONING],
               final("", "".join(REASONING), finish="max_tokens", open_=True, ms=0.0, tokens=9)])
    type_and_enter(w, "Think hard.")
    mid = w.stream.mid
    wait_reply(qtbot, w)
    block = w.chat.widget(mid).thinking
    assert block.toggle.text() == "▸ Thought · 9 tokens (unfinished)" and block.text == "".join(REASONING)
    m = w.store.message(mid)
    assert (m.content, m.reasoning, m.reasoning_open, m.finish_reason) == ("", "".join(REASONING), True,
                                                                          "max_tokens")
    cid = w.current
    w.close()

    w2 = window()  # the same data folder: a restart
    w2.select_conversation(cid)
    block = w2.chat.widget(mid).thinking
    assert block.isVisibleTo(w2) and not block.expanded  # loaded from the store: folded
    assert block.toggle.text() == "▸ Thought · 9 tokens (unfinished)" and block.text == "".join(REASONING)


def test_the_folded_line_says_what_the_figures_allow():
    assert thought_line({"reasoning_ms": 12_345, "reasoning_tokens": 412}) == "Thought for 12.3 s · 412 tokens"
    assert thought_line(None, 412) == "Thought · 412 tokens"          # a migrated reply: tokens, no time
    assert thought_line({"reasoning_ms": 800.0}) == "Thought for 0.8 s"
    assert thought_line(None) == "Thoughts" and thought_line({}, 1) == "Thought · 1 token"
    assert thought_line({"reasoning_ms": 0, "reasoning_tokens": 0}, None, True) == "Thoughts (unfinished)"


def shown(view) -> list:
    """test_app_render's dump of a view, formats compared by their properties without the list's object
    index: in the shown window a streamed reply's list is the document's second list object (the first
    was dropped with an earlier render), with or without reasoning; that number is not on screen."""
    def norm(x):
        if isinstance(x, QTextFormat):
            return sorted((k, repr(_value(v))) for k, v in x.properties().items()
                          if k != QTextFormat.Property.ObjectIndex)
        return [norm(y) for y in x] if isinstance(x, tuple) else x
    return [norm(e) for e in dump(view)]


def anchors(doc) -> list[str]:
    out, block = [], doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            f = it.fragment().charFormat()
            if f.isAnchor() or f.anchorHref():
                out.append(f.anchorHref())
            it += 1
        block = block.next()
    return out


def test_migrated_replies_show_their_reasoning_folded_and_stay_inert(qtbot, tmp_path):
    store = Store(tmp_path / "db.sqlite3")
    cid = store.create_conversation().id
    _, mid = store.start_turn(cid, "q")
    text = '<a href="https://evil.example">click</a> [x](https://evil.example) **bold**'
    store.finish_reply(mid, "Answer.", complete=True, finish_reason="eos", reasoning=text)
    m = store.message(mid)
    w = MessageWidget(m.id, "assistant", m.content, colors=BUBBLES["dark"])
    qtbot.addWidget(w)
    w.set_result(m.content, complete=True, finish_reason="eos", reasoning=m.reasoning)
    assert w.thinking.toggle.text() == "▸ Thoughts" and w.thinking.text == text  # as written: plain text
    assert not anchors(w.thinking.view.document())  # nothing in it is a link
    store.close()


def test_search_finds_reasoning_only_when_asked(qtbot, window):
    w = window()
    cid = w.current
    _, mid = w.store.start_turn(cid, "Tell me about animals")
    w.store.finish_reply(mid, "Horses are nice.", complete=True, finish_reason="eos",
                         reasoning="Maybe mention a zebra first.")
    box = w.conversations
    box.search.setText("zebra")
    assert box.hits.count() == 0
    box.search_reasoning.setChecked(True)
    assert box.hits.count() == 1 and "in its reasoning" in box.hit_widgets()[0].text()
    box.search.setText("horses")
    assert box.hits.count() == 1 and "in its reasoning" not in box.hit_widgets()[0].text()


def test_the_conversation_remembers_its_think_choice(tmp_path):
    s = Store(tmp_path / "db.sqlite3")
    a, b = s.create_conversation().id, s.create_conversation().id
    assert s.conversation(a).think is None  # untouched: the model's default
    s.set_think(a, False)
    s.set_think(b, "high")
    s.close()
    s = Store(tmp_path / "db.sqlite3")
    assert (s.conversation(a).think, s.conversation(b).think) == (False, "high")
    s.set_think(a, None)
    assert s.conversation(a).think is None
    cols = [r[1] for r in sqlite3.connect(tmp_path / "db.sqlite3").execute("PRAGMA table_info(conversations)")]
    assert "think" in cols and s.schema_version() >= 3
    s.close()


def test_the_thinking_budget_is_validated_and_reaches_the_sampling_params():
    assert Settings().sampling_params().reasoning_budget is None
    assert Settings(sampling={"reasoning_budget": 256}).validate().sampling_params().reasoning_budget == 256
    for bad in (-1, 2.5, True, "100"):
        with pytest.raises(SettingsError, match="reasoning_budget"):
            Settings(sampling={"reasoning_budget": bad}).validate()
    salvaged, problems = Settings.salvage({"sampling": {"reasoning_budget": -5, "top_k": 7}})
    assert salvaged.sampling["reasoning_budget"] is None and salvaged.sampling["top_k"] == 7
    assert any("reasoning_budget" in p for p in problems)


def test_the_budget_in_the_settings_dialog(qtbot):
    from app.settings_ui.sampling_form import SamplingForm

    f = SamplingForm({**Settings().sampling, "reasoning_budget": 300})
    qtbot.addWidget(f)
    budget = f.rows["reasoning_budget"].edit
    assert not budget.none.isChecked() and f.values()["reasoning_budget"] == 300
    budget.none.setChecked(True)
    assert f.values()["reasoning_budget"] is None


def test_the_think_box_shows_each_kind_and_the_models_default(qtbot):
    from engine.reply_formats import ThinkControl

    from app.chat.think_control import ThinkBox, effective

    box = ThinkBox()
    qtbot.addWidget(box)
    assert box.isHidden() and box.value() is None
    effort = ThinkControl("effort", "reasoning_effort", ("low", "medium", "high"), "medium")
    box.show_for(effort, None)
    assert not box.isHidden() and box.check.isHidden() and not box.combo.isHidden()
    assert box.value() == "medium" and box.combo.currentText() == "medium (default)"
    picked = []
    box.chosen.connect(picked.append)
    box.combo.setCurrentIndex(2)
    box.combo.activated.emit(2)
    assert picked == ["high"] and effort.kwargs(box.value()) == {"reasoning_effort": "high"}
    box.show_for(effort, "low")  # another conversation's choice; showing it is not a choice
    assert box.value() == "low" and picked == ["high"]
    switch = ThinkControl("switch", "enable_thinking", (True, False), True)
    box.show_for(switch, None)
    assert box.check.isVisibleTo(box) and box.combo.isHidden() and box.check.isChecked()
    box.check.click()
    assert picked == ["high", False] and box.value() is False
    budget = ThinkControl("budget", "thinking_budget", (-1, 0), -1)
    assert effective(budget, 512) == 512 and effective(budget, "x") == -1 and effective(switch, "high") is True
    box.show_for(budget, 0)
    assert not box.check.isChecked()
    box.show_for(None, None)
    assert box.isHidden()


def test_a_system_prompt_flag_goes_into_the_system_prompt_once_chosen(qtbot, tmp_path, monkeypatch):
    from engine.reply_formats import detect
    from engine.prompt.messages import Message

    from test_formats_templates import source

    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    w = MainWindow()
    w.host.think = detect(source("NVIDIA-Nemotron-Nano-v2")).think  # what a load of that model sets
    assert w.host.think.kind == "flag"
    cid = w.store.create_conversation().id
    w.store.add_message(cid, "user", "Hi")
    assert w.replies.history(cid, "Be brief.")[0] == Message("system", "Be brief.")  # untouched: as written
    assert w.replies.think_kwargs(cid) is None  # a flag is no template variable
    w.store.set_think(cid, "/no_think")
    assert w.replies.history(cid, "Be brief.")[0] == Message("system", "/no_think\nBe brief.")
    assert w.replies.history(cid, "")[0] == Message("system", "/no_think")
    w.close()


def test_the_thinking_screenshots_are_taken_live_then_folded(qtbot, tmp_path, monkeypatch):
    import sys
    from pathlib import Path

    from PySide6.QtGui import QImage

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import thinking_screenshots

    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path / "data"))
    thinking_screenshots.take(tmp_path, "dark")
    for name in ("screenshot-thinking-streaming-dark.png", "screenshot-thinking-folded-dark.png"):
        img = QImage(str(tmp_path / name))
        assert (img.width(), img.height()) == (1280, 800)


def test_back_in_a_chat_whose_reply_is_thinking_the_block_streams_again(qtbot, window):
    w = window()
    mid_way, answer_go = threading.Event(), threading.Event()
    first = [f"step {i}. " for i in range(FLUSH_DELTAS)]  # saved to the store: the chat is drawn with them
    script(w, [*[StreamEvent("reasoning", t) for t in first], mid_way,
               *[StreamEvent("reasoning", t) for t in REASONING], answer_go,
               StreamEvent("delta", "Hello!"), final("Hello!", "".join(first + REASONING))])
    type_and_enter(w, "Hi!")
    cid, mid = w.current, w.stream.mid
    qtbot.waitUntil(lambda: w.store.message(mid).reasoning == "".join(first))
    w.new_conversation()
    mid_way.set()
    qtbot.waitUntil(lambda: len(w.stream.thought) == len(first + REASONING))
    w.select_conversation(cid)
    block = w.chat.widget(mid).thinking
    qtbot.waitUntil(lambda: block.text == "".join(first + REASONING))
    assert block.expanded and block.toggle.text() == "▾ Thinking…"
    answer_go.set()
    wait_reply(qtbot, w)
    assert not block.expanded and block.toggle.text() == "▸ Thought for 12.3 s · 412 tokens"

"""The Think control in the real window, on the real bundled model.

With its own template the bundled model offers no Think control, so none is shown.
With Qwen3's real template put on it (a copy of the GGUF whose chat template is
replaced, written with gguf-py) the engine detects Qwen3's ``enable_thinking``
switch: the control shows, its choice is kept per conversation, and it reaches the
chat template (the reply's prompt is the one the template renders with that choice).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.chat.message_widget import MessageWidget
from app.core.settings import Settings, SettingsFile
from app.window.main_window import MainWindow
from test_app_window import type_and_enter, wait_reply

TEMPLATES = Path(__file__).parent / "fixtures" / "templates"


def with_template(src: Path, dst: Path, template: str) -> Path:
    """A copy of the GGUF ``src`` whose chat template is ``template`` (weights and vocabulary unchanged)."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata, get_field_data

    reader = gguf.GGUFReader(src, "r")
    writer = gguf.GGUFWriter(dst, arch=get_field_data(reader, gguf.Keys.General.ARCHITECTURE),
                             endianess=reader.endianess)
    alignment = get_field_data(reader, gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment
    copy_with_new_metadata(reader, writer, {gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(
        gguf.GGUFValueType.STRING, template)}, [])
    return dst


@pytest.fixture(scope="module")
def qwen3_model(bundled_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen3") / "smollm2-with-qwen3-template.gguf"
    return with_template(Path(bundled_path), out, (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text())


@pytest.fixture(scope="module")
def qwen35_model(bundled_path, tmp_path_factory):
    """Qwen3.5's template opens the reasoning block in the prompt: the bundled model's reply starts inside it."""
    out = tmp_path_factory.mktemp("qwen35") / "smollm2-with-qwen3.5-template.gguf"
    return with_template(Path(bundled_path), out, (TEMPLATES / "Qwen3.5-4B.jinja").read_text())


@pytest.fixture
def window(make_window):
    def make(model: str = "bundled", **sampling) -> MainWindow:
        s = Settings(model=model)
        s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 8, **sampling})
        SettingsFile().save(s)
        return make_window(write=False)

    return make


def test_no_think_control_where_the_template_offers_none(qtbot, window):
    w = window()
    assert w.host.think is None and not w.chat.think.isVisibleTo(w)
    type_and_enter(w, "Hi")
    assert w.host.job.template_kwargs is None
    wait_reply(qtbot, w)


def test_the_think_choice_is_kept_per_conversation_and_reaches_the_template(qtbot, window, qwen3_model):
    w = window(str(qwen3_model))
    think = w.host.think
    assert think is not None and (think.kind, think.variable) == ("switch", "enable_thinking")
    box = w.chat.think
    assert box.isVisibleTo(w) and box.check.isChecked()  # untouched: the model's default (on)
    a = w.current
    box.check.click()  # off, for this conversation only
    assert w.store.conversation(a).think is False
    type_and_enter(w, "Hi")
    job = w.host.job
    assert job.template_kwargs == {"enable_thinking": False}
    wait_reply(qtbot, w)
    engine = w.host.shared.engine
    off = w.store.messages(a)[-1].metrics["prompt_tokens"]
    assert off == len(engine.prompt_tokens(job.messages, {"enable_thinking": False}))

    w.new_conversation()
    b = w.current
    assert box.check.isChecked() and w.store.conversation(b).think is None  # a new one: the default again
    type_and_enter(w, "Hi")
    job = w.host.job
    assert job.template_kwargs == {"enable_thinking": True}
    wait_reply(qtbot, w)
    on = w.store.messages(b)[-1].metrics["prompt_tokens"]
    assert on == len(engine.prompt_tokens(job.messages, {"enable_thinking": True}))
    assert off > on  # thinking off: Qwen3's template writes an empty <think></think> into the prompt

    w.select_conversation(a)
    assert not box.check.isChecked()
    w.close()
    w2 = window(str(qwen3_model))  # a restart keeps the choice
    w2.select_conversation(a)
    assert w2.chat.think.isVisibleTo(w2) and not w2.chat.think.check.isChecked()
    w2.select_conversation(b)
    assert w2.chat.think.check.isChecked()


def test_a_real_thinking_reply_streams_into_the_block_and_the_budget_closes_it(qtbot, window, qwen35_model):
    """The real engine and parser: the reply starts inside the block the prompt opened; after 4 reasoning
    tokens the budget closes it the family's way and the model answers."""
    w = window(str(qwen35_model), reasoning_budget=4, max_tokens=16)
    type_and_enter(w, "Hi")
    mid = w.stream.mid
    wait_reply(qtbot, w)
    m = w.store.message(mid)
    r = w.chat.widget(mid)
    assert m.reasoning and m.content and not m.reasoning_open and m.finish_reason in ("eos", "max_tokens")
    assert "<think>" not in m.content and "</think>" not in m.content and "</think>" not in m.reasoning
    assert m.reasoning_tokens == m.metrics["reasoning_tokens"] >= 4
    assert any("thinking budget of 4 tokens reached" in n for n in m.metrics["notes"])
    assert r.thinking.text == m.reasoning and r.text == m.content and not r.thinking.expanded
    assert re.fullmatch(rf"▸ Thought for \d+\.\d s · {m.reasoning_tokens} tokens", r.thinking.toggle.text())
    assert "Thinking budget of 4 tokens reached; closed the block." in r.note.text().splitlines()
    fresh = MessageWidget(0, "assistant", m.content, colors=w.chat.colors)  # the answer's views: the answer only
    qtbot.addWidget(fresh)
    assert r.rendered_text() == fresh.rendered_text()


def test_a_real_reply_cut_inside_its_reasoning_is_kept_unfinished(qtbot, window, qwen35_model):
    w = window(str(qwen35_model), max_tokens=6)
    type_and_enter(w, "Hi")
    mid = w.stream.mid
    wait_reply(qtbot, w)
    m = w.store.message(mid)
    assert (m.content, m.reasoning_open, m.finish_reason) == ("", True, "max_tokens") and m.reasoning
    block = w.chat.widget(mid).thinking
    assert block.text == m.reasoning and block.toggle.text().endswith("(unfinished)")


def test_the_performance_panel_marks_the_thinking_span(qtbot, window, qwen35_model):
    """The reply's timeline shows where it thought: the first reasoning_tokens tokens are shaded
    on the tok/s chart, and the summary gives the span and the first answer text."""
    from PySide6.QtCharts import QAreaSeries

    from app.performance.performance_panel import PerformancePanel

    w = window(str(qwen35_model), reasoning_budget=4, max_tokens=12)
    type_and_enter(w, "Hi")
    mid = w.stream.mid
    wait_reply(qtbot, w)
    m = w.store.message(mid)
    assert m.reasoning_tokens and m.metrics["answer_tokens"]
    panel = PerformancePanel(m.metrics, 1 << 20, bandwidth=10e9)
    qtbot.addWidget(panel)
    areas = [s for s in panel.charts["speed"].series() if isinstance(s, QAreaSeries)]
    assert len(areas) == 1
    span = areas[0].upperSeries().points()
    assert (span[0].x(), span[-1].x()) == (1.0, float(m.reasoning_tokens))
    assert areas[0].name().startswith(f"thinking: {m.reasoning_tokens} tokens")
    assert f"thinking: tokens 1-{m.reasoning_tokens} (" in panel.summary.text()
    assert "first answer text at" in panel.summary.text()

    from test_timeline import OLD_METRICS

    plain = PerformancePanel(OLD_METRICS, 1 << 20, bandwidth=10e9)  # a reply that did not think
    qtbot.addWidget(plain)
    assert not [s for s in plain.charts["speed"].series() if isinstance(s, QAreaSeries)]
    assert "thinking" not in plain.summary.text()

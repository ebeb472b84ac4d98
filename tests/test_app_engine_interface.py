"""The window reaches an engine only through the engine interface (engine/interface.py): a fake
engine written against it, with no backend, no model file and no llama.cpp, drives a reply end to end."""
from __future__ import annotations

import threading

import pytest

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from engine.decode.metrics import GenerationStats
from engine.errors import ToolsUnsupported
from engine.interface import (OPTIONAL, Capabilities, ChatEngine, ModelInfo, count_image_tokens, plan_tools,
                              scheduling)
from engine.types import SamplingParams, StreamEvent

WORDS = ["Hello", " from", " the", " fake", " engine."]


class FakeEngine:
    """The engine interface in plain Python, its five members and no optional protocol: every reply is WORDS,
    one event each."""

    def __init__(self) -> None:
        self.asked: list[list] = []
        self.closed = False

    def describe(self) -> ModelInfo:
        return ModelInfo(label="Fake model", path="", bundled=False, backend="fake", quant="none", n_ctx=4096,
                         runtime="cpu", device="CPU", capabilities=self.capabilities())

    def capabilities(self) -> Capabilities:
        return Capabilities(exact_tokens=False)

    def count_tokens(self, messages, template_kwargs=None) -> int:
        return sum(len(str(getattr(m, "content", m)).split()) for m in messages)

    def stream(self, messages, params: SamplingParams | None = None, *, cancel: threading.Event | None = None,
               progress=None, context_policy: str = "drop_oldest", template_kwargs=None, tools=None,
               priority: int = 0, max_wait_s=None, label: str = ""):
        self.asked.append(list(messages))
        stats = GenerationStats(backend="fake", n_ctx=4096)
        for w in WORDS:
            stats.generated_tokens += 1
            yield StreamEvent("delta", w, stats=stats)
        stats.finish_reason = "eos"
        yield StreamEvent("final", "".join(WORDS), finish_reason="eos", stats=stats)

    def close(self) -> None:
        self.closed = True


def test_the_fake_implements_the_interface_and_no_optional_protocol():
    fake = FakeEngine()
    assert isinstance(fake, ChatEngine)
    assert not any(isinstance(fake, p) for p in OPTIONAL.values())
    with pytest.raises(ToolsUnsupported):
        plan_tools(fake, [])
    assert count_image_tokens(fake, b"") is None and scheduling(fake) is None


def test_a_fake_engine_drives_a_window_reply_end_to_end(qtbot, data_dir):
    from app.window.main_window import MainWindow
    from app.window.selftest import write_settings

    fake = FakeEngine()
    opened: list = []

    def opener(req, *, cancel, progress):
        opened.append(req)
        return fake, fake.describe()

    write_settings(max_tokens=24)
    w = MainWindow(opener=opener)
    try:
        w.show()
        w.start()
        qtbot.waitUntil(lambda: w.host.ready, timeout=30_000)
        assert len(opened) == 1 and "Fake model" in w.model_label.text()
        w.chat.input.setPlainText("Who are you?")
        QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: w.stream is None, timeout=30_000)
        msgs = w.store.messages(w.current)
        assert [m.role for m in msgs] == ["user", "assistant"]
        assert msgs[0].content == "Who are you?" and msgs[1].content == "".join(WORDS)
        assert msgs[1].metrics["finish_reason"] == "eos"
        assert w.chat.widget(msgs[1].id).text == "".join(WORDS)  # the view shows what the engine wrote
        assert fake.asked[-1][-1].content == "Who are you?"      # the message reached the engine as typed
    finally:
        w.close()
    assert fake.closed  # closing the window unloads the engine through the interface

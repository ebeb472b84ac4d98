"""First start: the welcome in an empty chat, example prompts that send, and the hint when
this machine's GPU could run a larger model (a simulated GPU through the real planner)."""
from __future__ import annotations

import pytest

from engine.sizing import load_machine as plan_load
from app.window.main_window import MainWindow
from app.window.selftest import write_settings
from app.chat.welcome import EXAMPLES
from engine.sizing.hardware import simulated


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    return tmp_path


def open_window(qtbot, start: bool = True) -> MainWindow:
    write_settings(max_tokens=8)
    w = MainWindow()
    w.show()
    qtbot.waitExposed(w)
    if start:
        w.start()
        qtbot.waitUntil(lambda: w.host.ready or not w.host.loading, timeout=60_000)
        assert w.host.ready, w.info.messages()
    return w


def test_an_empty_chat_welcomes_and_an_example_prompt_sends(qtbot, data_dir, monkeypatch):
    monkeypatch.setattr(plan_load, "machine", lambda fmt, **_kw: simulated("8GiB", "16GiB", cores=2))
    w = open_window(qtbot)
    panel = w.chat.empty
    assert panel.isVisibleTo(w)
    text = panel.body.text()
    assert "runs on this computer" in text and "SmolLM2-135M-Instruct" in text and "Settings → Model" in text
    assert [b.text() for b in panel.examples] == list(EXAMPLES) and len(EXAMPLES) == 3
    # The planner finds what an 8 GiB GPU runs entirely on the GPU; the bundled model is 135M.
    qtbot.waitUntil(lambda: w.hint_answered == 1, timeout=30_000)
    assert panel.hint.isVisibleTo(w)
    assert "simulated GPU 0, 8.00 GiB" in panel.hint.text() and "Llama-3.1-8B-Instruct" in panel.hint.text()
    panel.examples[1].click()
    assert w.stream is not None
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    msgs = w.store.messages(w.current)
    assert [m.role for m in msgs] == ["user", "assistant"] and msgs[0].content == EXAMPLES[1]
    assert not panel.isVisibleTo(w) and w.chat.input_text() == ""
    w.new_conversation()
    assert panel.isVisibleTo(w)  # every empty chat shows it
    w.close()


def test_no_hint_without_a_gpu_or_a_gpu_too_small(qtbot, data_dir, monkeypatch):
    for hw in (simulated("none", "16GiB", cores=2), simulated("512MiB", "16GiB", cores=2)):
        monkeypatch.setattr(plan_load, "machine", lambda fmt, hw=hw, **_kw: hw)
        w = open_window(qtbot)
        qtbot.waitUntil(lambda: w.hint_answered == 1, timeout=30_000)  # the answer (None) came back
        assert not w.chat.empty.hint.isVisibleTo(w) and w.chat.empty.isVisibleTo(w)
        w.close()


def test_an_example_clicked_before_the_model_is_ready_stays_in_the_box(qtbot, data_dir):
    w = open_window(qtbot, start=False)
    w.chat.empty.examples[0].click()
    assert w.stream is None and w.chat.input_text() == EXAMPLES[0]
    assert any("No model is loaded" in m for m in w.info.messages())
    w.close()


def test_the_welcome_fits_a_narrow_chat_pane(qtbot, data_dir):
    """With the chat pane squeezed (the Models dock open), the welcome wraps inside the view instead of
    widening the page past it and being cut off at the right edge."""
    w = open_window(qtbot, start=False)
    w.resize(1600, 900)
    w.chat.setFixedWidth(260)
    qtbot.waitUntil(lambda: w.chat.scroll.viewport().width() <= 260)
    qtbot.wait(50)
    view = w.chat.scroll.viewport().width()
    panel = w.chat.empty
    assert panel.width() <= view and all(b.width() <= view for b in panel.examples)
    assert panel.body.width() <= view
    assert panel.body.height() >= panel.body.heightForWidth(panel.body.width())  # every wrapped line shows
    w.close()


def test_a_hint_that_cannot_be_worked_out_is_left_out_and_says_why(qtbot, data_dir, monkeypatch, capfd):
    from app.core import upgrade_hint

    def broken(model_path, hardware):
        raise RuntimeError("ggml listed no devices")

    monkeypatch.setattr(plan_load, "machine", lambda fmt, **_kw: simulated("8GiB", "16GiB", cores=2))
    monkeypatch.setattr(upgrade_hint, "hint_for", broken)
    w = open_window(qtbot)
    qtbot.waitUntil(lambda: w.hint_answered == 1, timeout=30_000)  # the failure came back as an answer
    assert not w.chat.empty.hint.isVisibleTo(w)
    assert "hearth: no larger-model hint (RuntimeError: ggml listed no devices)" in capfd.readouterr().err
    w.close()

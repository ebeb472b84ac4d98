"""Long prompts and long chats in the real window (offscreen, bundled model, real SQLite):
reading progress and Stop during a prefill, the context meter, the marker where turns
were left out, the context-policy setting, and a replaced engine being freed."""
from __future__ import annotations

import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.main_window import MainWindow
from app.selftest import write_settings
from app.settings import Settings, SettingsFile

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


# -- the window ------------------------------------------------------------------


def test_a_long_prompt_shows_reading_progress_and_stop_works_while_it_is_read(qtbot, make_window, bundled_path):
    from engine import Engine

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
    mid = w.stream["mid"]
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
    second = w.stream["mid"]
    wait_reply(qtbot, w, timeout=180_000)  # ~1,500 prompt tokens on one busy CPU core
    reply = w.store.message(second)
    assert reply.finish_reason in ("eos", "max_tokens") and reply.content
    assert reply.metrics["prompt_tokens"] > 1400
    *history, last = w._history(cid, w.store.conversation(cid).system_prompt)
    assert [m.role for m in history] == ["system", "user", "user"] and last.content == reply.content
    fresh = Engine.load(bundled_path, n_ctx=w.host.model["n_ctx"], n_threads=w.host.model["n_threads"])
    try:
        final = [ev for ev in fresh.stream(history, w.settings.sampling_params()) if ev.kind != "delta"][-1]
    finally:
        fresh.close()
    assert reply.content == final.text  # the same reply as a fresh engine's

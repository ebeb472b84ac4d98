"""``--self-test`` and ``--screenshot``: drive the real window end to end.

Both type into the real input box and press Enter, so the whole path (window,
store, worker thread, engine, bundled model) is exercised. They run with a
temporary data folder so the user's own history is never touched.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Callable

from PySide6.QtCore import QEventLoop, Qt, QTimer
from PySide6.QtTest import QTest

from app.ui.loop_monitor import BUDGET_MS
from app.core.settings import Settings, SettingsFile


def wait_until(cond: Callable[[], bool], timeout_s: float) -> bool:
    """Run the real event loop until ``cond()`` is true (checked every 20 ms) or time runs out."""
    if cond():
        return True
    loop = QEventLoop()
    deadline = time.monotonic() + timeout_s
    timer = QTimer()
    timer.setInterval(20)
    timer.timeout.connect(lambda: loop.quit() if cond() or time.monotonic() > deadline else None)
    timer.start()
    loop.exec()
    timer.stop()
    return cond()


def write_settings(**sampling) -> None:
    """Settings for a deterministic run (greedy unless told otherwise)."""
    s = Settings()
    s.sampling.update({"temperature": 0.0, "seed": 0, **sampling})
    SettingsFile().save(s)


def send_and_wait(win, text: str, timeout_s: float = 120.0) -> dict:
    """Type ``text``, press Enter, wait for the reply; return the stored message as a dict."""
    win.chat.input.setPlainText(text)
    QTest.keyClick(win.chat.input, Qt.Key.Key_Return)
    if win.stream is None:
        raise RuntimeError("the message was not sent: " + " | ".join(win.info.messages()))
    mid = win.stream.mid
    if not wait_until(lambda: win.stream is None, timeout_s):
        raise RuntimeError(f"no reply within {timeout_s:.0f} s")
    m = win.store.message(mid)
    return {"id": mid, "text": m.content, "complete": m.complete, "finish_reason": m.finish_reason,
            "error": m.error, "metrics": m.metrics}


def _start_window(hardware=None):
    from app.window.main_window import MainWindow

    t0 = time.perf_counter()
    win = MainWindow()
    if hardware is not None:  # before the first scan, so no badge is planned for another machine
        win.models_dock.library_view.hardware = win.models_dock.hub.hardware = hardware
    win.show()
    shown_ms = (time.perf_counter() - t0) * 1e3
    win.start()
    loaded_before_shown = win.host.ready  # must be False: the window comes first
    if not wait_until(lambda: win.host.ready or not win.host.loading, 120.0) or not win.host.ready:
        raise RuntimeError("the model did not load: " + " | ".join(win.info.messages()))
    return win, shown_ms, (time.perf_counter() - t0) * 1e3, loaded_before_shown


def run_self_test(max_tokens: int = 32, prompt: str = "What is the capital of France?",
                  gap_budget_ms: float | None = None) -> int:
    """Print one JSON line with the reply's metrics and the worst event-loop gaps; 0 on success."""
    budget = BUDGET_MS if gap_budget_ms is None else gap_budget_ms
    result: dict = {"ok": False}
    win = None
    try:
        write_settings(max_tokens=max_tokens)
        win, shown_ms, loaded_ms, loaded_before_shown = _start_window()
        reply = send_and_wait(win, prompt)
        wait_until(lambda: False, 0.1)  # the monitor keeps watching a few ticks past the end
        gaps = {k: round(v, 1) for k, v in win.monitor.worst_ms.items()}
        problems = []
        if not reply["text"].strip():
            problems.append("the reply is empty")
        if reply["error"]:
            problems.append(f"the reply failed: {reply['error']}")
        if loaded_before_shown:
            problems.append("the model was loaded before the window appeared")
        if "torch" in sys.modules:
            problems.append("torch was imported")
        if max(gaps.values(), default=0.0) >= budget:
            problems.append(f"the event loop stalled for {max(gaps.values()):.0f} ms (budget {budget:.0f})")
        result = {"ok": not problems, "problems": problems, "reply": reply["text"],
                  "finish_reason": reply["finish_reason"], "metrics": reply["metrics"],
                  "event_loop_max_gap_ms": gaps, "gap_budget_ms": budget, "window_shown_ms": round(shown_ms, 1),
                  "model_ready_ms": round(loaded_ms, 1), "model": win.host.model.label,
                  "torch_imported": "torch" in sys.modules}
    except Exception as e:  # the one line must still come out, saying what went wrong
        result = {"ok": False, "problems": [f"{type(e).__name__}: {e}"]}
    finally:
        if win is not None:
            win.close()
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


SCREENSHOT_PROMPTS = (
    "Hi! What can you help me with?",
    "Write a Python function that reverses a string.",
)


def _badges_done(items, badge_of) -> bool:
    return bool(items) and all(badge_of(i) != "…" for i in items)


def show_models(win, page: str, search: str = "GGUF", timeout_s: float = 120.0) -> None:
    """Open the Models dock on ``page``: "library" (the models on disk), or "hub" (search the Hub for
    ``search``, open the first result, select its first file that fits the GPU); return once the
    table and its fit badges are filled."""
    dock = win.models_dock
    win.show_library()
    win.resizeDocks([dock], [int(win.width() * 0.66)], Qt.Orientation.Horizontal)
    lib = dock.library_view
    if page == "library":
        if not wait_until(lambda: lib.scanning == 0 and _badges_done(
                [m.path for m in lib.models if not m.error], lib.badge_of), timeout_s):
            raise RuntimeError(f"the library did not fill: {lib.status.text()}")
        return
    hub = dock.hub
    dock.tabs.setCurrentWidget(hub)
    hub.query.setText(search)
    hub.search_button.click()
    if not wait_until(lambda: hub.busy == 0, timeout_s) or hub.results.count() == 0:
        raise RuntimeError(f"the Hub search found nothing: {hub.status.text()}")
    hub.results.setCurrentRow(0)
    hub.results.parentWidget().setSizes([140, 360, 160])  # the splitter: most room for the files and their badges
    if not wait_until(lambda: hub.busy == 0 and _badges_done([f.name for f in hub.files], hub.badge_of),
                      timeout_s):
        raise RuntimeError(f"the repository's files did not fill: {hub.status.text()}")
    from engine.library import FIT_GPU

    best = next((f for f in hub.files if hub.badge_of(f.name) == FIT_GPU), hub.files[0])
    hub.select_file(best.name)  # the one a user would pick


def take_screenshot(path: str, theme: str = "system", show: str | None = None, search: str = "GGUF",
                    hardware=None) -> int:
    """Hold a short real conversation and save a picture of the window to ``path``
    (``theme``: system, light or dark, as View → Theme sets it). ``show`` "library" or "hub"
    pictures the Models dock instead (see show_models); ``hardware`` plans its fit badges for
    that machine (engine.sizing.hardware.simulated) rather than this one."""
    win = None
    try:
        write_settings(max_tokens=160, repeat_penalty=1.1)
        win, *_ = _start_window(hardware)
        win.set_theme(theme)
        win.resize(1600, 900) if show else win.resize(1280, 800)
        if show is not None:
            show_models(win, show, search)
        else:
            replies = [send_and_wait(win, p) for p in SCREENSHOT_PROMPTS]
            win.rename_conversation(win.current, "Reversing a string in Python")
            last = win.chat.widget(replies[-1]["id"])
            if last is not None:
                last.btn_details.click()  # show that each reply carries its own metrics
        wait_until(lambda: False, 0.5)  # let layouts and the last render settle
        if not win.grab().save(path):
            raise RuntimeError(f"could not write {path}")
        print(f"saved {path}")
        return 0
    except Exception as e:
        print(f"screenshot failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if win is not None:
            win.close()

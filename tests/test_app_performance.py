"""The window's tuning features on the real bundled model: the exact/fast choice,
"Benchmark this model" and the Performance panel (offscreen)."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.window.main_window import MainWindow
from app.window.selftest import send_and_wait, write_settings
from app.core.model_defaults import yours
from app.core.settings import SettingsFile


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def window(qtbot, data_dir):
    write_settings(max_tokens=24)
    w = MainWindow()
    w.show()
    w.start()
    qtbot.waitUntil(lambda: w.host.ready or not w.host.loading, timeout=60_000)
    assert w.host.ready, w.info.messages()
    yield w
    w.close()


def test_fast_profile_is_chosen_in_settings_and_the_window_says_what_it_means(qtbot, window):
    from app.window.model_loading import FAST_NOTE
    from app.settings_ui.settings_dialog import SettingsDialog

    w = window
    assert w.settings.exactness == "exact" and w.host.model.local.exactness == "exact"  # the default
    assert "fast" not in w.model_label.text()
    dlg = SettingsDialog(w.settings, w)
    qtbot.addWidget(dlg)
    assert dlg.exactness.currentData() == "exact" and "token for token" in dlg.exactness_note.text()
    dlg.exactness.setCurrentIndex(dlg.exactness.findData("fast"))
    assert "may differ slightly" in dlg.exactness_note.text()
    w.apply_settings(dlg.build())
    qtbot.waitUntil(lambda: w.host.ready and w.host.model.local.exactness == "fast", timeout=60_000)
    assert w.model_label.text().endswith("fast kernels") and FAST_NOTE in w.model_label.toolTip()
    assert FAST_NOTE in w.info.messages()
    assert SettingsFile().load()[0].exactness == "fast"  # saved, so the next start loads it too
    reply = send_and_wait(w, "Say hello.")
    assert reply["text"] and not reply["error"], reply


# -- the Performance panel --------------------------------------------------------------------

def _colors(img) -> set:
    step = max(1, img.width() // 120)
    return {img.pixel(x, y) for x in range(0, img.width(), step) for y in range(0, img.height(), step)}


def test_performance_panel_renders_a_real_reply_offscreen(qtbot, engine, tmp_path):
    from PySide6.QtCharts import QBarSeries, QHorizontalStackedBarSeries, QLineSeries

    from app.performance.performance_panel import PART_COLORS, PerformancePanel, roofline, tok_s_curve
    from engine.prompt.messages import Message
    from engine.types import SamplingParams

    evs = list(engine.stream([Message("user", "Tell me about the sea.")],
                             SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)))
    metrics = evs[-1].stats.as_dict()  # what the store keeps with the message
    model_bytes = engine.backend.memory_report()["weights"]
    panel = PerformancePanel(metrics, model_bytes, threads=2)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(lambda: panel.bandwidth is not None, timeout=60_000)  # measured on its own thread
    tl = panel.stats
    assert tl.generated_tokens == 48 and len(tl.step_ms) == 47
    (stack,) = panel.charts["parts"].series()
    assert isinstance(stack, QHorizontalStackedBarSeries)
    assert [b.at(0) for b in stack.barSets()] == pytest.approx(list(tl.parts().values()))
    (line,) = panel.charts["speed"].series()
    assert isinstance(line, QLineSeries) and line.count() == 47
    assert line.at(46).y() == pytest.approx(tok_s_curve(tl.step_ms)[-1])
    (hist,) = panel.charts["histogram"].series()
    assert isinstance(hist, QBarSeries) and sum(hist.barSets()[0].at(i) for i in range(10)) == 47
    (roof,) = panel.charts["roofline"].series()
    achieved, share = roofline(model_bytes, metrics["decode_tok_s"], panel.bandwidth)
    assert [b.at(0) for b in roof.barSets()] == pytest.approx([achieved / 1e9, panel.bandwidth / 1e9])
    assert f"{share:.0%} of memory bandwidth" in panel.charts["roofline"].title()
    qtbot.wait(50)  # let the chart views lay out the roofline before the picture is taken
    img = panel.grab().toImage()
    img.save(str(tmp_path / "performance_panel.png"))
    colors = _colors(img)
    assert len(colors) > 20  # a picture, not a blank dialog
    from PySide6.QtGui import QColor

    assert QColor(PART_COLORS["decode"]).rgb() in colors  # the decode segment is drawn


def test_a_bandwidth_that_cannot_be_measured_says_so_on_the_roofline(qtbot, engine, monkeypatch):
    from app.performance import performance_panel
    from engine.sizing import bandwidth
    from engine.prompt.messages import Message
    from engine.types import SamplingParams

    def no_memory(threads, mib):
        raise MemoryError("64 MiB")

    monkeypatch.setattr(performance_panel, "_BANDWIDTH", [])  # not measured yet in this process
    monkeypatch.setattr(bandwidth, "measure_read_bandwidth", no_memory)
    evs = list(engine.stream([Message("user", "Hi")], SamplingParams(temperature=0, max_tokens=4)))
    panel = performance_panel.PerformancePanel(evs[-1].stats.as_dict(), 1 << 20, threads=2)
    qtbot.addWidget(panel)
    qtbot.waitUntil(lambda: "could not be measured" in panel.charts["roofline"].title(), timeout=30_000)
    assert panel.charts["roofline"].title().endswith("(MemoryError: 64 MiB)") and panel.bandwidth is None


def test_tok_s_curve_and_roofline_on_hand_written_steps():
    from app.performance.performance_panel import roofline, tok_s_curve

    assert tok_s_curve([10.0, 10.0, 30.0], window=2).tolist() == pytest.approx([100.0, 100.0, 50.0])
    assert tok_s_curve([]).size == 0
    assert roofline(1_000_000, 50.0, 1e8) == (5e7, 0.5)


def test_a_reply_stored_by_an_older_version_still_renders(qtbot):
    from app.chat.message_widget import MessageWidget
    from app.core.text_utils import metrics_line
    from app.performance.performance_panel import PerformancePanel
    from app.ui.theme import BUBBLES
    from test_timeline import OLD_METRICS

    line = metrics_line(OLD_METRICS)
    assert "4 tokens · 115.8 tok/s · TTFT 82 ms · prompt 136 (cached 16)" in line and "ended: max_tokens" in line
    widget = MessageWidget(1, "assistant", "", colors=BUBBLES["light"])
    qtbot.addWidget(widget)
    widget.set_result("Red, orange", complete=False, finish_reason="max_tokens", metrics=OLD_METRICS)
    assert widget.btn_perf.isEnabled() and widget.details.text() == line
    panel = PerformancePanel(OLD_METRICS, 100_000_000, bandwidth=10e9)
    qtbot.addWidget(panel)
    (stack,) = panel.charts["parts"].series()
    assert [b.at(0) for b in stack.barSets()] == pytest.approx([0.41, 1.2, 1.0, 80.5, 25.0, 0.2, 0.1])
    assert "slowest step #2 12.2 ms" in panel.summary.text() and "1491 tok/s (16 cached)" in panel.summary.text()
    (roof,) = panel.charts["roofline"].series()
    assert roof.barSets()[0].at(0) == pytest.approx(100e6 * 115.83 / 1e9)


# -- from the window --------------------------------------------------------------------------

def test_a_replys_performance_button_opens_its_panel(qtbot, window):
    w = window
    reply = send_and_wait(w, "Name a fruit.")
    assert reply["metrics"]["timed"] and reply["metrics"]["generated_tokens"] > 0  # recorded, and the store kept it
    from app.chat.message_widget import MessageWidget

    (widget,) = [m for m in w.chat.findChildren(MessageWidget) if m.mid == reply["id"]]
    assert widget.btn_perf.isVisible() and widget.btn_perf.isEnabled()
    widget.btn_perf.click()
    panel = w.performance_panel
    assert panel is not None and panel.isVisible()
    assert panel.stats.generated_tokens == reply["metrics"]["generated_tokens"]
    assert panel.model_bytes == w.host.model.local.memory["weights"]
    assert len(_colors(panel.grab().toImage())) > 20
    panel.close()
    w.act_performance.trigger()  # the menu opens the newest reply's panel
    assert w.performance_panel is not panel and w.performance_panel.stats.generated_tokens > 0
    w.act_benchmark.trigger()  # and "Benchmark this model…" for the loaded model
    dlg = w.tune_dialog
    assert dlg.isVisible() and dlg.model_path == w.host.model.path
    dlg.rows_to_run = ["KV q8_0"]
    dlg.prompts.setValue(1)
    dlg.tokens.setValue(2)
    dlg.start_button.click()
    assert dlg.running
    w.close()  # closing the window mid-run stops the run and ends its thread before the window goes
    assert not dlg.running and dlg.result is None


@pytest.mark.timeout(1800)  # three rows, run twice, on a shared 2-core machine
def test_benchmark_dialog_runs_off_the_gui_thread_exports_compares_applies_and_rolls_back(qtbot, window, tmp_path):
    from PySide6.QtCore import QThread

    from engine.tuning import report

    from app.performance.tune_dialog import TuneDialog

    w = window
    before = w.settings
    # as the Performance menu makes it: the window's idle OpenMP workers are given back as each run starts
    # (without that they spin beside the measured threads: this test took 84 s instead of a few)
    ident = w.host.identity
    dlg = TuneDialog(w.host.model.path, w.host.model.label, lambda: w.settings, w.apply_settings, w,
                     identity=ident, before_run=w.host.release_compute_threads)
    qtbot.addWidget(dlg)
    dlg.show()
    assert dlg.result is None and not dlg.csv_button.isEnabled()  # nothing saved yet
    dlg.rows_to_run = ["KV q8_0"]
    dlg.prompts.setValue(1)
    dlg.tokens.setValue(4)
    dlg.start_button.click()
    assert dlg.running and dlg._runner.thread() is dlg._thread and dlg._thread is not QThread.currentThread()
    qtbot.waitUntil(lambda: not dlg.running, timeout=1_500_000)  # the GUI thread kept handling events
    assert dlg.result is not None, dlg.status.text()
    assert dlg.bar.value() == dlg.bar.maximum() == 3  # progress reached the GUI thread row by row
    assert [dlg.table.item(i, 0).text() for i in range(dlg.table.rowCount())] == \
        ["baseline", "KV q8_0", "baseline (again)"]
    assert len(dlg.chart.series()) == 1 and dlg.chart.series()[0].count() == 2  # TTFT and TPOT bars
    saved = report.last_run(w.host.model.path)
    assert saved is not None and report.load_run(saved)["rows"] == dlg.result["rows"]
    assert dlg.table.item(0, 7).text() == "—"  # nothing earlier to compare with
    dlg.export_csv(tmp_path / "t.csv")
    dlg.export_json(tmp_path / "t.json")
    assert (tmp_path / "t.csv").read_text().count("\n") == 4
    assert report.load_run(tmp_path / "t.json")["rows"] == dlg.result["rows"]

    dlg.start_button.click()
    qtbot.waitUntil(lambda: not dlg.running, timeout=1_500_000)
    assert dlg.previous is not None and dlg.table.item(0, 7).text().startswith("tok/s ")

    best = dlg.best_row()
    assert best is not None and dlg.apply_button.isEnabled()
    dlg.apply_button.click()
    assert ident.key in w.settings.tuning and dlg.rollback_button.isEnabled()
    assert yours(w.settings, ident) == best["settings"]  # the model's own (tests/test_model_tuning.py)
    assert w.settings.load_spec() == before.load_spec()
    assert SettingsFile().load()[0].tuning == w.settings.tuning  # saved through the one settings file
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
    dlg.rollback_button.click()
    assert yours(w.settings, ident) == {} and w.settings.tuning == {}
    assert not dlg.rollback_button.isEnabled()
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
    dlg.close()


def test_a_reply_s_details_give_each_mode_s_tokens_and_every_switch(qtbot):
    from app.chat.message_widget import MessageWidget
    from app.core.text_utils import metrics_line, speculation_lines
    from app.ui.theme import BUBBLES

    notes = ["model draft <b>d</b>.gguf not used: it failed to load",
             "ngram drafts held back: accepted 0.22 at the first position, a verified token costs 0.75 of a step"]
    m = {"generated_tokens": 40, "decode_tok_s": 20.0, "finish_reason": "eos",
         "spec": {"drafted": 12, "accepted": 9, "acceptance_rate": 0.75, "target_passes_per_token": 0.8,
                  "tokens_by_mode": {"ngram": 14, "plain": 26}, "notes": notes}}
    lines = speculation_lines(m)
    assert lines[0] == ("Speculation: 26 tokens from plain decoding, 14 from n-gram drafts; 9 of 12 drafts accepted, "
                        "0.80 target passes per token")
    assert lines[1:] == ["· Model draft <b>d</b>.gguf not used: it failed to load", "· N" + notes[1][1:]]
    assert speculation_lines({"generated_tokens": 3}) == []  # plain decoding: nothing to say
    w = MessageWidget(1, "assistant", "", colors=BUBBLES["light"])
    qtbot.addWidget(w)
    w.set_result("x", complete=True, finish_reason="eos", metrics=m)
    assert w.details.text() == "\n".join([metrics_line(m), *lines])
    assert w.details.textFormat() == Qt.TextFormat.PlainText  # the file name stays text

""""Benchmark this model": engine.tuning's rows in a table and a chart, run off the GUI thread.

The run happens on the dialog's own thread (the chat stays usable; a reply
running at the same time shows up as noise). Every run is saved under the data
folder and compared with the one before it. "Apply best" makes the best row's
load settings this model's own (kept by its content, applied whenever it loads;
app/core/model_defaults.py apply_tuning, the one place), and "Roll back"
restores what that replaced.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from PySide6.QtCharts import QBarCategoryAxis, QBarSet, QChart, QChartView, QHorizontalBarSeries, QValueAxis
from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtGui import QBrush, QColor, QFont, QPainter
from PySide6.QtWidgets import (QDialog, QFileDialog, QHBoxLayout, QLabel, QProgressBar, QPushButton, QSpinBox,
                               QTableWidget, QTableWidgetItem, QVBoxLayout)

from engine import Cancelled, HearthError
from engine.tuning import report, run_tune

from app.core.model_defaults import ModelIdentity, apply_tuning, is_tuned, roll_back_tuning
from app.core.settings import Settings, SettingsError
from app.core.text_utils import human_bytes

COLUMNS = ("Row", "TTFT ms", "TPOT ms", "tok/s", "Memory", "Perplexity", "Agreement", "vs last run", "Verdict")
WORSE = QColor("#f8d7da")


class TuneRunner(QObject):
    """Runs run_tune on the dialog's thread; only emits signals."""

    progress = Signal(int, int, str)
    done = Signal(object)
    failed = Signal(str)

    def __init__(self, path: str, kwargs: dict[str, Any], cancel: threading.Event) -> None:
        super().__init__()
        self.path, self.kwargs, self.cancel = path, kwargs, cancel

    @Slot()
    def run(self) -> None:
        try:
            result = run_tune(self.path, progress=self.progress.emit, cancel=self.cancel, **self.kwargs)
            result["saved"] = str(report.save(result))
            self.done.emit(result)
        except Cancelled:
            self.failed.emit("Stopped; nothing was saved.")
        except HearthError as e:
            self.failed.emit(str(e))
        except Exception as e:  # a bug or a native failure: still a message, never silence
            self.failed.emit(f"{type(e).__name__}: {e}")


class TuneDialog(QDialog):
    """The table, the chart and the buttons. ``settings()`` gives the window's current
    settings; ``apply`` adopts new ones (the window's apply_settings); ``identity``: the
    model measured, as its own settings know it."""

    def __init__(self, model_path: str, label: str, settings: Callable[[], Settings],
                 apply: Callable[[Settings], None], parent=None, *, identity: ModelIdentity,
                 only: Sequence[str] | None = None, threads: int | None = None,
                 before_run: Callable[[], None] | None = None) -> None:
        """``before_run`` is called as each run starts (the window: the engine thread gives
        back its idle OpenMP workers, so the measured thread runs as it would alone)."""
        super().__init__(parent)
        self.identity = identity
        self._before_run = before_run
        self.setWindowTitle(f"Benchmark {label}")
        self.resize(980, 720)
        self.model_path, self._settings, self._apply, self.rows_to_run, self._threads = \
            model_path, settings, apply, only, threads
        self.result: dict[str, Any] | None = None
        self.previous: dict[str, Any] | None = None
        self._thread: QThread | None = None
        self._cancel = threading.Event()
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        self.prompts = QSpinBox()
        self.prompts.setRange(1, 8)
        self.prompts.setValue(4)
        self.tokens = QSpinBox()
        self.tokens.setRange(2, 1024)
        self.tokens.setValue(64)
        self.start_button = QPushButton("Run")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self._cancel.set)
        self.stop_button.setEnabled(False)
        self.bar = QProgressBar()
        for w in (QLabel("Prompts"), self.prompts, QLabel("Tokens per reply"), self.tokens, self.start_button,
                  self.stop_button, self.bar):
            top.addWidget(w)
        lay.addLayout(top)
        self.status = QLabel("A baseline first, then one change at a time, then the baseline again (the noise).")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        lay.addWidget(self.table, 3)
        self.chart = QChart()
        self.chart.setTitle("Against the baseline (1.0 = the same; shorter is faster)")
        self.chart_view = QChartView(self.chart)
        self.chart_view.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.chart_view.setMinimumHeight(260)
        lay.addWidget(self.chart_view, 2)
        buttons = QHBoxLayout()
        self.csv_button = QPushButton("Export CSV…")
        self.csv_button.clicked.connect(lambda: self._export("CSV (*.csv)", self.export_csv))
        self.json_button = QPushButton("Export JSON…")
        self.json_button.clicked.connect(lambda: self._export("JSON (*.json)", self.export_json))
        self.apply_button = QPushButton("Apply best")
        self.apply_button.clicked.connect(self.apply_best)
        self.rollback_button = QPushButton("Roll back")
        self.rollback_button.clicked.connect(self.roll_back)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        for b in (self.csv_button, self.json_button, self.apply_button, self.rollback_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(close)
        lay.addLayout(buttons)
        last = report.last_run(model_path)
        if last is not None:  # open on the newest saved run: no need to measure again to see it
            try:
                self.show_result(report.load_run(last), previous=self._previous_of(last))
            except HearthError as e:
                self.status.setText(f"The last saved run could not be shown: {e}")
        self._update_buttons()

    # -- running ------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self.running:
            return
        self._cancel.clear()
        if self._before_run is not None:
            self._before_run()
        kwargs: dict[str, Any] = {"prompts": self.prompts.value(), "tokens": self.tokens.value(),
                                  "threads": self._threads, "only": self.rows_to_run}
        self._thread = QThread(self)
        self._runner = TuneRunner(self.model_path, kwargs, self._cancel)
        self._runner.moveToThread(self._thread)
        self._thread.started.connect(self._runner.run)
        self._runner.progress.connect(self._on_progress)
        self._runner.done.connect(self._on_done)
        self._runner.failed.connect(self._on_failed)
        self.start_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.status.setText("Measuring… (a reply in the chat meanwhile adds noise)")
        self._thread.start()
        self._update_buttons()

    def _finish_thread(self) -> None:
        if self._thread is not None:
            self._thread.quit()
            self._thread.wait()
            self._thread = None
        self.start_button.setEnabled(True)
        self.stop_button.setEnabled(False)
        self._update_buttons()

    def _on_progress(self, done: int, total: int, name: str) -> None:
        self.bar.setRange(0, total)
        self.bar.setValue(done)
        if name:
            self.status.setText(f"Row {done + 1} of {total}: {name}…")

    def _on_done(self, result: dict) -> None:
        self._finish_thread()
        self.show_result(result, previous=self._previous_of(result["saved"]))

    def _on_failed(self, message: str) -> None:
        self._finish_thread()
        self.status.setText(message)

    def _previous_of(self, saved: str | Path) -> dict | None:
        p = report.last_run(self.model_path, before=saved)
        try:
            return report.load_run(p) if p is not None else None
        except HearthError:
            return None

    def done(self, r: int) -> None:  # noqa: D401 (Qt override): closing stops a run first
        if self.running:
            self._cancel.set()
            self._finish_thread()
        super().done(r)

    # -- showing ------------------------------------------------------------

    def show_result(self, result: dict, previous: dict | None = None) -> None:
        """Fill the table and the chart with ``result`` (and deltas against ``previous``)."""
        self.result, self.previous = result, previous
        deltas = {d["name"]: d for d in report.compare_runs(previous, result)} if previous else {}
        rows = result["rows"]
        self.table.setRowCount(len(rows))
        for i, r in enumerate(rows):
            measured = r["status"] == "measured"
            d = deltas.get(r["name"])
            cells = [r["name"]]
            if measured:
                cells += [f"{r['ttft_ms']:.0f}", f"{r['tpot_ms']:.1f}", f"{r['tok_s']:.1f}",
                          human_bytes(r["memory_bytes"]), f"{r['perplexity']:.3f}", f"{r['agreement']:.0%}",
                          f"tok/s {d['tok_s']:+.0%}, TTFT {d['ttft_ms']:+.0%}" if d else "—",
                          ("worse: " + ", ".join(r["worse"])) if r["worse"] else "ok"]
            else:
                cells += [""] * 7 + [f"not measured: {r['absent']}"]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(r["change"] if c == 0 else text)
                if r.get("worse"):
                    item.setBackground(QBrush(WORSE))
                if r["name"] == result.get("best"):
                    f = QFont()
                    f.setBold(True)
                    item.setFont(f)
                self.table.setItem(i, c, item)
        self.table.resizeColumnsToContents()
        self._draw_chart(result)
        noise = result["noise"]
        best = result.get("best") or "the baseline (nothing beat it beyond the noise)"
        since = f"; compared with the run of {previous['created']}" if previous else ""
        self.status.setText(f"Noise (baseline vs its repeat): TTFT {noise['ttft_ms']:.0%}, TPOT "
                            f"{noise['tpot_ms']:.0%}. Best: {best}. Run of {result['created']}{since}.")
        self._update_buttons()

    def _draw_chart(self, result: dict) -> None:
        self.chart.removeAllSeries()
        for axis in self.chart.axes():
            self.chart.removeAxis(axis)
        rows = [r for r in result["rows"] if r["status"] == "measured"]
        base = rows[0]
        series = QHorizontalBarSeries()
        for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "time per token")):
            bars = QBarSet(label)
            bars.append([r[key] / base[key] if base[key] else 0.0 for r in rows])
            series.append(bars)
        self.chart.addSeries(series)
        names = QBarCategoryAxis()
        names.append([r["name"] for r in rows])
        values = QValueAxis()
        values.setTitleText("× baseline")
        self.chart.addAxis(names, Qt.AlignmentFlag.AlignLeft)
        self.chart.addAxis(values, Qt.AlignmentFlag.AlignBottom)
        series.attachAxis(names)
        series.attachAxis(values)

    def _update_buttons(self) -> None:
        have = self.result is not None and not self.running
        self.csv_button.setEnabled(have)
        self.json_button.setEnabled(have)
        best = self.best_row()
        self.apply_button.setEnabled(have and best is not None)
        self.apply_button.setToolTip(f"Make {best['name']!r} this model's own load settings (Settings → Sampling, "
                                     f"this model): {best['settings']}" if best
                                     else "No row beat the baseline beyond the noise")
        self.rollback_button.setEnabled(is_tuned(self._settings(), self.identity))

    # -- actions ------------------------------------------------------------

    def best_row(self) -> dict | None:
        if self.result is None or not self.result.get("best"):
            return None
        return next(r for r in self.result["rows"] if r["name"] == self.result["best"])

    def apply_best(self) -> None:
        row = self.best_row()
        if row is None:
            return
        try:
            self._apply(apply_tuning(self._settings(), self.identity, row["settings"]))
        except SettingsError as e:
            self.status.setText(f"Could not apply {row['name']!r}: {e}")
            return
        self.status.setText(f"{row['name']!r} is now this model's own load settings (other models keep theirs); "
                            "Roll back restores the previous ones.")
        self._update_buttons()

    def roll_back(self) -> None:
        try:
            self._apply(roll_back_tuning(self._settings(), self.identity))
        except SettingsError as e:
            self.status.setText(str(e))
            return
        self.status.setText("The model's settings from before \"Apply best\" are back.")
        self._update_buttons()

    def export_csv(self, path: str | Path) -> None:
        assert self.result is not None
        Path(path).write_text(report.to_csv(self.result), encoding="utf-8")

    def export_json(self, path: str | Path) -> None:
        assert self.result is not None
        Path(path).write_text(json.dumps(self.result, indent=2) + "\n", encoding="utf-8")

    def _export(self, kind: str, write: Callable[[str], None]) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export the benchmark", str(Path.home()), kind)
        if not path:
            return
        try:
            write(path)
        except OSError as e:
            self.status.setText(f"Could not write {path}: {e}")
            return
        self.status.setText(f"Exported to {path}")

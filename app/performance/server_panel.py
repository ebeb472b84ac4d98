"""The Server panel: the local server over its last minutes, as pictures (QtCharts).

Beside the Performance panel (one reply), this one shows the server as a whole: requests
over time, p50/p99 time to first token and time per output token, the queue (running and
waiting), the KV occupancy of the API's batch context, and each device key's use. Every
figure comes from the server's registry (engine/serve/metrics.py), which computes the
window; the panel only draws it, once a second while it is open.
"""
from __future__ import annotations

from typing import Callable

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import QPointF, Qt, QTimer
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (QComboBox, QDialog, QGridLayout, QHBoxLayout, QHeaderView, QLabel, QTableWidget,
                               QTableWidgetItem, QVBoxLayout)

from engine.serve import MetricsWindow, ServerMetrics

SPANS_MIN = (1, 5, 15)   # the spans offered, in minutes (the registry keeps 15)
BUCKETS = 30             # slices of the span in the request and latency charts
REFRESH_MS = 1000
LINES = {  # chart: (series name, colour), drawn in this order
    "requests": (("requests", "#4c6ef5"),),
    "ttft": (("p50", "#2f9e44"), ("p99", "#e8590c")),
    "tpot": (("p50", "#2f9e44"), ("p99", "#e8590c")),
    "queue": (("running", "#2f9e44"), ("waiting", "#e64980")),
    "kv": (("used", "#f59f00"),),
}
TITLES = {"requests": "Requests finished", "ttft": "Time to first token (ms)", "tpot": "Time per output token (ms)",
          "queue": "Queue: requests running and waiting", "kv": "KV occupancy of the API's batch context (%)"}


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.1f} ms"


def _share(x: float | None) -> str:
    return "–" if x is None else f"{x:.0%}"


def summary_text(v: MetricsWindow) -> str:
    """The panel's line of figures for the span."""
    minutes = v.span_s / 60
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(v.finish_reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    line = (f"Last {minutes:.0f} min: {v.requests} request{'' if v.requests == 1 else 's'}"
            + (f" ({reasons})" if reasons else "")
            + f" · TTFT p50 {_ms(v.ttft_p50_s)}, p99 {_ms(v.ttft_p99_s)} · TPOT p50 {_ms(v.tpot_p50_s)}, "
            f"p99 {_ms(v.tpot_p99_s)} · end to end p50 {_ms(v.e2e_p50_s)}, p99 {_ms(v.e2e_p99_s)} · queue wait p99 "
            f"{_ms(v.queue_p99_s)} · {v.prompt_tokens:,} prompt tokens ({_share(v.prefix_hit_rate)} from the cache), "
            f"{v.generated_tokens:,} generated · drafts accepted {_share(v.spec_acceptance)}")
    now = v.latest
    if now is not None:
        line += f" · now {now.running} running, {now.waiting} waiting"
        if now.kv_capacity_tokens:
            line += f", KV {now.kv_used_tokens:,} of {now.kv_capacity_tokens:,} tokens ({_share(now.kv_fraction)})"
    return line


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


class ServerPanel(QDialog):
    """The server's last minutes from ``metrics``; ``status()`` says where the server is (or that it is off)."""

    def __init__(self, metrics: ServerMetrics, status: Callable[[], str], parent=None) -> None:
        super().__init__(parent)
        self.metrics, self._status = metrics, status
        self.setWindowTitle("Local server")
        self.resize(1100, 820)
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        self.status = QLabel()
        self.span = QComboBox()
        for m in SPANS_MIN:
            self.span.addItem(f"last {m} min", m * 60.0)
        self.span.setCurrentIndex(SPANS_MIN.index(5))
        self.span.currentIndexChanged.connect(self.refresh)
        top.addWidget(self.status, 1)
        top.addWidget(self.span)
        lay.addLayout(top)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        lay.addWidget(self.summary)
        grid = QGridLayout()
        lay.addLayout(grid, 1)
        self.charts: dict[str, QChart] = {}
        self.series: dict[str, dict[str, QLineSeries]] = {}
        self._axes: dict[str, tuple[QValueAxis, QValueAxis]] = {}
        for i, name in enumerate(LINES):
            grid.addWidget(self._chart(name), i // 2, i % 2)
        self.keys = QTableWidget(0, 5)
        self.keys.setHorizontalHeaderLabels(["Device key", "Requests", "Prompt tokens", "Generated", "Last request"])
        self.keys.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.keys.verticalHeader().hide()
        self.keys.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        grid.addWidget(self.keys, 2, 1)
        self.view: MetricsWindow | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        self.refresh()

    def _chart(self, name: str) -> QChartView:
        chart = QChart()
        chart.setTitle(TITLES[name])
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
        x, y = QValueAxis(), QValueAxis()
        x.setTitleText("minutes ago")
        chart.addAxis(x, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(y, Qt.AlignmentFlag.AlignLeft)
        self.series[name] = {}
        for label, color in LINES[name]:
            s = QLineSeries()
            s.setName(label)
            s.setPen(QPen(QColor(color), 2))
            chart.addSeries(s)
            s.attachAxis(x)
            s.attachAxis(y)
            self.series[name][label] = s
        self.charts[name], self._axes[name] = chart, (x, y)
        view = QChartView(chart)
        view.setRenderHint(QPainter.RenderHint.Antialiasing)
        view.setMinimumSize(360, 200)
        return view

    def refresh(self) -> None:
        """Draw the span now (the registry computes it; this only draws)."""
        v = self.metrics.window(float(self.span.currentData()), buckets=BUCKETS)
        self.view = v
        self.status.setText(self._status())
        self.summary.setText(summary_text(v))
        minutes = v.span_s / 60

        def mid(b) -> float:
            return -(b.start_ago_s + b.end_ago_s) / 120

        def at(s) -> float:
            return (s.at - v.now) / 60

        points = {
            "requests": {"requests": [(mid(b), b.requests) for b in v.buckets]},
            "ttft": {q: [(mid(b), getattr(b, f"ttft_{q}_s") * 1e3) for b in v.buckets
                         if getattr(b, f"ttft_{q}_s") is not None] for q in ("p50", "p99")},
            "tpot": {q: [(mid(b), getattr(b, f"tpot_{q}_s") * 1e3) for b in v.buckets
                         if getattr(b, f"tpot_{q}_s") is not None] for q in ("p50", "p99")},
            "queue": {"running": [(at(s), s.running) for s in v.samples],
                      "waiting": [(at(s), s.waiting) for s in v.samples]},
            "kv": {"used": [(at(s), s.kv_fraction * 100) for s in v.samples if s.kv_fraction is not None]},
        }
        for name, by in points.items():
            top = 0.0
            for label, pts in by.items():
                self.series[name][label].replace([QPointF(float(x), float(y)) for x, y in pts])
                top = max([top, *(float(y) for _x, y in pts)])
            x, y = self._axes[name]
            x.setRange(-minutes, 0)
            x.setLabelFormat("%.1f" if minutes < 2 else "%.0f")
            # A small KV share would lie flat on a 0-100 axis: the axis follows the data, its labels say how much.
            y.setRange(0, min(100.0, max(5.0, top * 1.15)) if name == "kv" else max(1.0, top * 1.15))
            y.applyNiceNumbers()
            counts = name in ("requests", "queue")
            if counts and y.max() <= 10:  # whole numbers: one tick each, never "0.5 requests"
                y.setTickCount(int(y.max()) + 1)
            y.setLabelFormat("%.0f" if counts or y.max() >= 10 else "%.1f")
        self._fill_keys(v)

    def _fill_keys(self, v: MetricsWindow) -> None:
        rows = [(k.name + (f" · {k.key_id}" if k.key_id and k.key_id != "settings" else ""), f"{k.requests}",
                 f"{k.prompt_tokens:,}", f"{k.generated_tokens:,}", _ago(k.last_ago_s)) for k in v.keys]
        if not rows:
            rows = [("no request with a key in this span", "", "", "", "")]
        self.keys.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                self.keys.setItem(r, c, QTableWidgetItem(text))

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self._timer.stop()
        super().closeEvent(event)

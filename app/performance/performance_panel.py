"""The Performance panel of one reply: where its time went, as pictures (QtCharts).

Four charts from the reply's stored metrics, its timeline included (engine/metrics.py):
- a stacked bar of the parts (template, tokenize, queue, prefill, decode, sampling, detokenize);
- tok/s over the reply (a moving average of the per-token steps);
- a histogram of the per-token step times;
- the roofline: bytes the decode read per second (the weights once per token, so
  model bytes x tok/s) against this machine's memory bandwidth, which says
  whether decoding is memory-bound.
The bandwidth is measured once per process, off the GUI thread
(app/bridge/background.py); the panel shows the rest at once.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCharts import (QAreaSeries, QBarCategoryAxis, QBarSeries, QBarSet, QChart, QChartView,
                              QHorizontalBarSeries, QHorizontalStackedBarSeries, QLineSeries, QValueAxis)
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QDialog, QGridLayout, QLabel, QVBoxLayout

from engine import GenerationStats, has_timeline

from app.bridge.background import Background, error_text

PART_COLORS = {"template": "#7950f2", "tokenize": "#4c6ef5", "queue_wait": "#adb5bd", "prefill": "#f59f00",
               "decode": "#2f9e44", "sampling": "#e64980", "detokenize": "#15aabf"}
HIST_BINS = 10         # few enough that every bin's label fits under it
SMOOTH = 16            # steps in tok/s's moving average
BANDWIDTH_MIB = 64     # buffer copied to measure bandwidth: far past the caches, quick to copy
_BANDWIDTH: list[float] = []  # measured once per process
THINKING_COLOR = "#be4bdb"  # the thinking span, behind the tok/s curve (translucent)
MEMORY_BOUND = 0.6     # the share of bandwidth from which the step is waiting on memory


def timeline_of(metrics: dict | None) -> GenerationStats | None:
    """The reply's stats from its stored metrics (either stored form), or None when
    they say nothing of where the time went."""
    return GenerationStats.from_dict(metrics) if metrics and has_timeline(metrics) else None


def tok_s_curve(step_ms: list[float], window: int = SMOOTH) -> np.ndarray:
    """tok/s after each step: 1000 / the mean of the last ``window`` steps."""
    steps = np.asarray(step_ms, dtype=np.float64)
    if steps.size == 0:
        return steps
    w = max(1, min(window, steps.size))
    csum = np.concatenate([[0.0], np.cumsum(steps)])
    idx = np.arange(1, steps.size + 1)
    lo = np.maximum(0, idx - w)
    mean = (csum[idx] - csum[lo]) / (idx - lo)
    return np.where(mean > 0, 1e3 / np.maximum(mean, 1e-9), 0.0)


def roofline(model_bytes: int, tok_s: float, bandwidth: float) -> tuple[float, float]:
    """(achieved bytes/s, its share of ``bandwidth``): every decode step reads the weights once."""
    achieved = float(model_bytes) * tok_s
    return achieved, (achieved / bandwidth if bandwidth > 0 else 0.0)


def _short(ms: float) -> str:
    return f"{ms:.0f}" if ms >= 10 else f"{ms:.1f}"


def _chart(title: str) -> tuple[QChart, QChartView]:
    chart = QChart()
    chart.setTitle(title)
    chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
    view = QChartView(chart)
    view.setRenderHint(QPainter.RenderHint.Antialiasing)
    view.setMinimumSize(380, 240)
    return chart, view


def _axes(chart: QChart, series: Any, x: Any, y: Any) -> None:
    chart.addAxis(x, Qt.AlignmentFlag.AlignBottom)
    chart.addAxis(y, Qt.AlignmentFlag.AlignLeft)
    series.attachAxis(x)
    series.attachAxis(y)


class PerformancePanel(QDialog):
    """The four charts for one reply. ``model_bytes``: the weights decode reads per
    token; ``bandwidth``: bytes/s, measured here when not given."""

    def __init__(self, metrics: dict, model_bytes: int, bandwidth: float | None = None, parent=None,
                 *, threads: int = 1) -> None:
        super().__init__(parent)
        stats = timeline_of(metrics)
        if stats is None:
            raise ValueError("this reply has no timeline (it was written before Hearth recorded them)")
        self.stats, self.model_bytes = stats, model_bytes
        self.setWindowTitle("Performance of this reply")
        self.resize(1000, 720)
        lay = QVBoxLayout(self)
        self.summary = QLabel(self._summary())
        self.summary.setWordWrap(True)
        lay.addWidget(self.summary)
        grid = QGridLayout()
        lay.addLayout(grid, 1)
        self.charts: dict[str, QChart] = {}
        for i, (name, build) in enumerate((("parts", self._parts), ("speed", self._speed),
                                           ("histogram", self._histogram), ("roofline", self._roofline_chart))):
            chart, view = build()
            self.charts[name] = chart
            grid.addWidget(view, i // 2, i % 2)
        self._bg = Background(self)
        self.bandwidth: float | None = None
        if bandwidth is not None:
            self.set_bandwidth(bandwidth)
        elif _BANDWIDTH:
            self.set_bandwidth(_BANDWIDTH[0])
        else:
            self._bg.run(lambda: _measure(threads), on_done=self.set_bandwidth, on_failed=self._not_measured,
                         name="hearth-bandwidth")

    def _summary(self) -> str:
        t = self.stats
        return (f"{t.generated_tokens} tokens in {t.e2e_ms:.0f} ms · TTFT {t.ttft_ms:.0f} ms · prefill "
                f"{t.prefill_tokens} tokens at {t.prefill_tok_s:.0f} tok/s ({t.cached_tokens} cached) · TPOT "
                f"P50 {t.tpot_p50_ms:.1f} / P90 {t.tpot_p90_ms:.1f} / P99 {t.tpot_p99_ms:.1f} ms, slowest step "
                f"#{t.slowest_step} {t.slowest_step_ms:.1f} ms · KV {t.kv_used:,} of {t.n_ctx:,} · prefix cache "
                f"hits {t.cache_hits}, inserts {t.cache_inserts}, evictions {t.cache_evictions}"
                + self._thinking_summary())

    def _thinking_summary(self) -> str:
        t = self.stats
        span = t.thinking_span_ms
        if span is None:
            return ""
        answer = f", first answer text at {t.ttft_answer_ms:.0f} ms" if t.ttft_answer_ms else ", no answer yet"
        return (f" · thinking: tokens 1-{t.reasoning_tokens} ({span[0]:.0f}-{span[1]:.0f} ms, "
                f"{t.reasoning_ms / 1e3:.1f} s){answer}, {t.answer_tokens} answer tokens")

    def _parts(self) -> tuple[QChart, QChartView]:
        chart, view = _chart(f"Where the time went ({self.stats.e2e_ms:.0f} ms end to end)")
        series = QHorizontalStackedBarSeries()
        for name, ms in self.stats.parts().items():
            bars = QBarSet(f"{name.replace('_', ' ')} {ms:.0f} ms")
            bars.setColor(QColor(PART_COLORS[name]))
            bars.append(ms)
            series.append(bars)
        chart.addSeries(series)
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignRight)  # seven names: a column keeps them whole
        cats = QBarCategoryAxis()
        cats.append(["reply"])
        ms = QValueAxis()
        ms.setTitleText("ms")
        ms.setRange(0, max(1.0, self.stats.e2e_ms))
        ms.setLabelFormat("%.0f")
        ms.setTickCount(4)
        _axes(chart, series, ms, cats)
        return chart, view

    def _speed(self) -> tuple[QChart, QChartView]:
        chart, view = _chart(f"tok/s over the reply (mean of the last {SMOOTH} steps)")
        curve = tok_s_curve(self.stats.step_ms)
        line = QLineSeries()
        line.setName("tok/s")
        line.replace([QPointF(float(i + 1), float(v)) for i, v in enumerate(curve)])
        chart.addSeries(line)
        x, y = QValueAxis(), QValueAxis()
        x.setTitleText("token")
        x.setRange(1, max(2, len(curve)))
        y.setTitleText("tok/s")
        top = float(curve.max()) * 1.1 if curve.size else 1.0
        y.setRange(0, top)
        _axes(chart, line, x, y)
        if self.stats.reasoning_tokens:
            # The thinking span: the reply's first reasoning_tokens tokens, shaded behind the curve.
            end = float(max(2, self.stats.reasoning_tokens))
            x.setRange(1, max(end, float(len(curve))))
            upper, lower = QLineSeries(), QLineSeries()
            upper.replace([QPointF(1.0, top), QPointF(end, top)])
            lower.replace([QPointF(1.0, 0.0), QPointF(end, 0.0)])
            area = QAreaSeries(upper, lower)
            for edge in (upper, lower):  # the area draws them but does not own them
                edge.setParent(area)
            area.setName(f"thinking: {self.stats.reasoning_tokens} tokens, {self.stats.reasoning_ms / 1e3:.1f} s")
            color = QColor(THINKING_COLOR)
            color.setAlpha(60)
            area.setColor(color)
            area.setBorderColor(color)
            chart.addSeries(area)
            area.attachAxis(x)
            area.attachAxis(y)
        return chart, view

    def _histogram(self) -> tuple[QChart, QChartView]:
        chart, view = _chart("Per-token step times")
        steps = np.asarray(self.stats.step_ms, dtype=np.float64)
        counts, edges = np.histogram(steps, bins=HIST_BINS) if steps.size else (np.zeros(1), np.zeros(2))
        bars = QBarSet("tokens")
        bars.append([float(c) for c in counts])
        series = QBarSeries()
        series.setBarWidth(1.0)
        series.append(bars)
        chart.addSeries(series)
        cats = QBarCategoryAxis()
        cats.append([_short((a + b) / 2) for a, b in zip(edges[:-1], edges[1:])])
        cats.setTitleText("ms per token (bin centres)")
        y = QValueAxis()
        y.setRange(0, float(counts.max()) * 1.1 if counts.size and counts.max() > 0 else 1.0)
        y.setLabelFormat("%d")
        _axes(chart, series, cats, y)
        chart.legend().hide()
        return chart, view

    def _roofline_chart(self) -> tuple[QChart, QChartView]:
        chart, view = _chart("Roofline: measuring this machine's memory bandwidth…")
        return chart, view

    def set_bandwidth(self, bandwidth: float) -> None:
        """Draw the roofline against ``bandwidth`` bytes/s."""
        self.bandwidth = bandwidth
        tok_s = self.stats.decode_tok_s
        achieved, share = roofline(self.model_bytes, tok_s, bandwidth)
        chart = self.charts["roofline"]
        chart.removeAllSeries()
        for axis in chart.axes():
            chart.removeAxis(axis)
        bound = "memory-bound" if share >= MEMORY_BOUND else "not memory-bound"
        chart.setTitle(f"Roofline: {share:.0%} of memory bandwidth, {bound}")
        chart.setToolTip("Each decode step reads the weights once: achieved = model bytes × tok/s")
        series = QHorizontalBarSeries()
        for label, value, color in ((f"achieved {achieved / 1e9:.2f} GB/s", achieved, "#2f9e44"),
                                    (f"measured bandwidth {bandwidth / 1e9:.1f} GB/s", bandwidth, "#adb5bd")):
            bars = QBarSet(label)
            bars.setColor(QColor(color))
            bars.append(value / 1e9)
            series.append(bars)
        chart.addSeries(series)
        cats = QBarCategoryAxis()
        cats.append(["decode"])
        gb = QValueAxis()
        gb.setTitleText("GB/s (achieved = model bytes × tok/s)")
        gb.setRange(0, max(achieved, bandwidth) / 1e9 * 1.1 or 1.0)
        _axes(chart, series, gb, cats)

    def _not_measured(self, e: BaseException) -> None:
        self.charts["roofline"].setTitle(f"Roofline: this machine's memory bandwidth could not be measured "
                                         f"({error_text(e)})")


def _measure(threads: int) -> float:
    """On a worker thread: this machine's read bandwidth, kept for the next panel (even when the
    one that asked was closed while measuring)."""
    from engine.sizing import measure_read_bandwidth

    bw = measure_read_bandwidth(max(1, threads), mib=BANDWIDTH_MIB)
    _BANDWIDTH[:] = [bw]
    return bw

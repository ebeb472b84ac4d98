"""Memory details: the loaded model's plan against what the backend allocated, part by part.

Opened from the memory figure in the status bar. The figure there is the
"total" row here: weights + KV cache + compute buffers, the parts llama.cpp
allocates up front and the plan predicts, each with the planner's relative
error ((planned - allocated) / allocated). The prefix cache is shown on its
own rows: in RAM it is a budget that fills as prompts are cached, on disk a
capped folder (with "Clear cache"). Every load's check is also appended to the
plan log, so drift over time can be seen.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from engine.loading import DEFAULT_DISK_BUDGET, clear_store, store_usage
from engine import LocalDetails, ModelInfo

from app.core.paths import plan_log_path, prefix_store_dir
from app.core.text_utils import human_bytes

PARTS = (("weights", "weights"), ("kv", "KV cache"), ("compute", "compute buffers"),
         ("weights_gpu", "weights on the GPU"), ("kv_gpu", "KV cache on the GPU"),
         ("compute_gpu", "compute buffers on the GPU"),
         ("total", "total (the status bar's figure)"))
HEADERS = ("part", "planned", "allocated", "plan error")


def _error(e: float | None) -> str:
    return "—" if e is None else f"{e:+.1%}"


def details_rows(info: LocalDetails, disk_bytes: int) -> list[tuple[str, str, str, str]]:
    """(part, planned, allocated, plan error) rows for the loaded model (its backend's figures)."""
    plan = info.plan
    rows: list[tuple[str, str, str, str]] = []
    if plan is None:
        rows.append(("total (the status bar's figure)", "no plan", human_bytes(info.memory_total), "—"))
    else:
        pred, act, rel = plan["predicted"], plan["actual"], plan["rel_error"]
        for key, label in PARTS:
            if key in pred or key in act:
                rows.append((label, human_bytes(pred.get(key, 0)) if key in pred else "—",
                             human_bytes(act.get(key, 0)) if key in act else "—", _error(rel.get(key))))
    budget = plan["prefix_cache"] if plan is not None else info.prefix_budget
    rows.append(("prefix cache in RAM", f"up to {human_bytes(budget)}" if budget else "off",
                 "fills as prompts are cached", "—"))
    rows.append(("prefix cache on disk", f"up to {human_bytes(DEFAULT_DISK_BUDGET)}", human_bytes(disk_bytes), "—"))
    if info.draft_model:
        planned = human_bytes(plan["draft_bytes"]) if plan is not None and plan.get("draft_bytes") else "—"
        rows.append((f"draft model ({info.draft_model})", planned, human_bytes(info.draft_memory), "—"))
    return rows


def device_lines(info: LocalDetails) -> list[str]:
    """'CPU: 21.7 GiB free of 23.5 GiB' for each ggml device, read after the load."""
    devs = info.devices
    names = [k.split(":", 1)[1] for k in devs if k.startswith("device_total:")]
    return [f"{n}: {human_bytes(devs.get('device_free:' + n, 0))} free of {human_bytes(devs['device_total:' + n])}"
            for n in names]


MEMORY_TIP = ("Weights + KV cache + compute buffers of the loaded model, as the backend allocated them: the "
              "parts the memory plan predicts. Click for plan vs allocated, part by part.")


def memory_tooltip(info: LocalDetails) -> str:
    """What the status bar's memory figure counts, and how far the plan was from it."""
    act = (info.plan or {}).get("actual") or {}
    lines = [f"Weights + KV cache + compute buffers, as allocated: {human_bytes(info.memory_total)}"]
    if act:
        lines.append(f"(weights {human_bytes(act['weights'])}, KV cache {human_bytes(act['kv'])}, "
                     f"compute {human_bytes(act['compute'])})")
    plan = info.plan
    if plan is not None:
        total = plan["predicted"].get("total", plan["predicted"].get("weights", 0))
        err = plan["rel_error"].get("total", plan["rel_error"].get("weights"))
        lines.append(f"The memory plan predicted {human_bytes(total)} for the same parts "
                     f"({_error(err)} off).")
    budget = plan["prefix_cache"] if plan is not None else info.prefix_budget
    lines.append(f"Not in this figure: the prefix cache (up to {human_bytes(budget)} in RAM as prompts are "
                 "cached), runtime overhead and the plan's safety margin.")
    lines.append("Click for plan vs allocated, part by part.")
    return "\n".join(lines)


def clear_prefix_store() -> int:
    """Delete the disk prefix store's snapshots; returns the bytes freed."""
    return clear_store(prefix_store_dir())


class MemoryFigure(QLabel):
    """The status bar's memory figure; a click opens the details."""

    clicked = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip(MEMORY_TIP)

    def mouseReleaseEvent(self, e) -> None:  # noqa: N802 (Qt override)
        if e.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit()
        super().mouseReleaseEvent(e)


class MemoryDetails(QDialog):
    """Plan vs allocated for the loaded model, the devices' memory, and the plan itself."""

    def __init__(self, model: ModelInfo, info: LocalDetails, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Memory details")
        self.setMinimumWidth(620)
        self._info = info
        lay = QVBoxLayout(self)
        plan = info.plan
        head = QLabel(f"<b>{model.label}</b> · {model.quant} · context {model.n_ctx:,} · "
                      f"runs on {model.runtime} ({model.device})<br>" +
                      (f"Plan: {plan['summary']}<br>Machine: {plan['hardware']}" if plan else
                       "No memory plan covers this set-up (a GGUF file on transformers)."))
        head.setWordWrap(True)
        lay.addWidget(head)
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        lay.addWidget(self.table)
        if plan is not None:
            worst = QLabel(f"Largest plan error: {plan['max_rel_error']:.1%} "
                           f"({'within' if plan['within_margin'] else 'beyond'} the plan's safety margin). "
                           f"Every load's check is recorded in {plan_log_path()}.")
            worst.setWordWrap(True)
            lay.addWidget(worst)
        devices = device_lines(info)
        if devices:
            lay.addWidget(QLabel("Devices after the load: " + "; ".join(devices)))
        if plan is not None:
            view = QPlainTextEdit(plan["table"])
            view.setReadOnly(True)
            view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
            view.setMinimumHeight(200)
            lay.addWidget(view)
        row = QHBoxLayout()
        self.clear_button = QPushButton("Clear cache")
        self.clear_button.setToolTip(f"Delete the saved system-prompt snapshots in {prefix_store_dir()}")
        self.clear_button.clicked.connect(self.clear_cache)
        self.cleared = QLabel()
        row.addWidget(self.clear_button)
        row.addWidget(self.cleared, 1)
        lay.addLayout(row)
        box = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        box.rejected.connect(self.reject)
        lay.addWidget(box)
        self.refresh()

    def refresh(self) -> None:
        """Fill the table (the disk store's size is read now)."""
        rows = details_rows(self._info, store_usage(prefix_store_dir())[1])
        self.table.setRowCount(len(rows))
        for r, cells in enumerate(rows):
            for c, text in enumerate(cells):
                self.table.setItem(r, c, QTableWidgetItem(text))
        self.table.resizeColumnsToContents()

    def clear_cache(self) -> None:
        freed = clear_prefix_store()
        self.cleared.setText(f"Freed {human_bytes(freed)} of saved prompt snapshots.")
        self.refresh()

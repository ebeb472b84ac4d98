"""The download queue: Hub files fetched one at a time, each with progress, pause, resume and cancel.

It drives engine.models.hub.download (Hearth's resumable downloader) on a
background thread. Pause stops the transfer and keeps the partial file, so
Resume continues from the bytes on disk (an HTTP Range request); Cancel stops it
and deletes the partial file. The Hub's listed sha256 is checked by the
downloader before a file counts as done. A finished download lands in the
Hugging Face cache, where the model library finds it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (QHBoxLayout, QHeaderView, QProgressBar, QPushButton, QTableWidget,
                               QTableWidgetItem, QWidget)

from engine.library import HubFile

from app.bridge.background import Background, error_text
from app.core.text_utils import human_bytes

QUEUED, RUNNING, PAUSED, CANCELLED, DONE, FAILED = "queued", "downloading", "paused", "cancelled", "done", "failed"
BAR_STEPS = 1000


@dataclass(slots=True)
class Download:
    """One queued download and where it stands."""

    repo_id: str
    file: HubFile
    kind: str                       # "gguf" (one file, or its shards) or "transformers" (the model's files)
    state: str = QUEUED
    done: int = 0
    total: int = 0
    error: str = ""
    path: Path | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    discard: bool = False           # cancel (delete the partial file) rather than pause

    @property
    def title(self) -> str:
        return f"{self.repo_id}/{self.file.name}" if self.file.name else self.repo_id


class DownloadQueue(QObject):
    """The queue; lives on the GUI thread, transfers on a worker thread."""

    changed = Signal(int)             # index of the download whose state or progress changed
    finished = Signal(object)         # a Download that is done

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.items: list[Download] = []
        self.active: int | None = None
        self._bg = Background(self)

    def add(self, repo_id: str, file: HubFile, kind: str = "gguf") -> int:
        """Queue a download; it starts when the ones before it are done. Returns its index."""
        for i, d in enumerate(self.items):
            if d.repo_id == repo_id and d.file.parts == file.parts and d.state in (QUEUED, RUNNING, PAUSED):
                return i
        self.items.append(Download(repo_id, file, kind, total=file.size))
        i = len(self.items) - 1
        self.changed.emit(i)
        self._next()
        return i

    def pause(self, i: int) -> None:
        d = self.items[i]
        if d.state == RUNNING:
            d.discard = False
            d.cancel.set()            # the worker stops between chunks and keeps the partial file
        elif d.state == QUEUED:
            d.state = PAUSED
            self.changed.emit(i)

    def resume(self, i: int) -> None:
        d = self.items[i]
        if d.state in (PAUSED, FAILED):
            d.state, d.error = QUEUED, ""
            self.changed.emit(i)
            self._next()

    def cancel(self, i: int) -> None:
        d = self.items[i]
        if d.state == RUNNING:
            d.discard = True
            d.cancel.set()
        elif d.state in (QUEUED, PAUSED, FAILED):
            self._discard(d)
            d.state = CANCELLED
            self.changed.emit(i)
            self._next()

    def stop_all(self) -> None:
        """The window is closing: stop the transfer in flight, keeping its partial file (a
        later download of the same file continues from it), and hold the queued ones."""
        for i, d in enumerate(self.items):
            if d.state == QUEUED:
                d.state = PAUSED
        if self.active is not None:
            self.pause(self.active)

    def _discard(self, d: Download) -> None:
        from engine.library import discard_partial

        discard_partial(d.repo_id, list(d.file.etags.values()))
        d.done = 0

    def _next(self) -> None:
        if self.active is not None:
            return
        i = next((k for k, d in enumerate(self.items) if d.state == QUEUED), None)
        if i is None:
            return
        d = self.items[i]
        d.state, d.discard = RUNNING, False
        d.cancel = threading.Event()
        self.active = i
        self.changed.emit(i)
        repo_id, name, cancel = d.repo_id, d.file.name or None, d.cancel  # the worker sees plain values only
        self._bg.run(lambda report: _transfer(repo_id, name, cancel, report),
                     on_done=lambda path: self._on_ended(i, DONE, "", path),
                     on_failed=lambda e: self._ended_by(i, e),
                     on_progress=lambda done, total: self._on_progress(i, done, total),
                     cancel=cancel, name="hearth-download")

    def _ended_by(self, i: int, e: BaseException) -> None:
        from engine.library import DownloadCancelled

        if isinstance(e, DownloadCancelled):  # Pause or Cancel: which one is read here, on the GUI thread
            self._on_ended(i, CANCELLED if self.items[i].discard else PAUSED, "", None)
        else:
            self._on_ended(i, FAILED, error_text(e), None)

    def _on_progress(self, i: int, done: int, total: int) -> None:
        d = self.items[i]
        d.done, d.total = done, total or d.total
        self.changed.emit(i)

    def _on_ended(self, i: int, state: str, error: str, path) -> None:
        d = self.items[i]
        if state == CANCELLED:
            self._discard(d)
        d.state, d.error, d.path = state, error, path
        self.active = None
        self.changed.emit(i)
        if state == DONE:
            self.finished.emit(d)
        self._next()


def _transfer(repo_id: str, name: str | None, cancel: threading.Event, report) -> Path:
    """On the worker thread: the transfer (a window that closes meanwhile keeps the partial file)."""
    from engine.library import download

    return download(repo_id, filename=name, progress=lambda done, total, _n: report(done, total), cancel=cancel)


class DownloadsView(QTableWidget):
    """One row per download: what, progress, state, and Pause/Resume/Cancel."""

    def __init__(self, queue: DownloadQueue, parent: QWidget | None = None) -> None:
        super().__init__(0, 4, parent)
        self.queue = queue
        self.setHorizontalHeaderLabels(("Download", "Progress", "State", ""))
        self.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.verticalHeader().hide()
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        queue.changed.connect(self.update_row)

    def buttons(self, i: int) -> dict[str, QPushButton]:
        """The row's buttons by label ("Pause", "Resume", "Cancel")."""
        w = self.cellWidget(i, 3)
        return {b.text(): b for b in w.findChildren(QPushButton)} if w else {}

    def update_row(self, i: int) -> None:
        d = self.queue.items[i]
        if i >= self.rowCount():
            self.setRowCount(i + 1)
            self.setItem(i, 0, QTableWidgetItem(d.title))
            bar = QProgressBar()
            bar.setRange(0, BAR_STEPS)
            self.setCellWidget(i, 1, bar)
            self.setItem(i, 2, QTableWidgetItem())
            cell = QWidget()
            row = QHBoxLayout(cell)
            row.setContentsMargins(0, 0, 0, 0)
            for label, fn in (("Pause", self.queue.pause), ("Resume", self.queue.resume),
                              ("Cancel", self.queue.cancel)):
                b = QPushButton(label)
                b.clicked.connect(lambda _=False, fn=fn, i=i: fn(i))
                row.addWidget(b)
            self.setCellWidget(i, 3, cell)
        bar = self.cellWidget(i, 1)
        bar.setValue(int(BAR_STEPS * d.done / d.total) if d.total else 0)
        bar.setFormat(f"{human_bytes(d.done)} of {human_bytes(d.total)}")
        state = self.item(i, 2)
        state.setText(d.state + (f": {d.error}" if d.error else ""))
        state.setToolTip(d.error or (str(d.path) if d.path else ""))
        b = self.buttons(i)
        b["Pause"].setEnabled(d.state in (QUEUED, RUNNING))
        b["Resume"].setEnabled(d.state in (PAUSED, FAILED))
        b["Cancel"].setEnabled(d.state in (QUEUED, RUNNING, PAUSED, FAILED))
        self.item(i, 0).setData(Qt.ItemDataRole.UserRole, d.state)

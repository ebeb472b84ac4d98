"""The Hub browser: search the Hugging Face Hub, see a repository's model files with their size and
the planner's fit badge before downloading, and queue downloads.

A thin view of engine.models.hub_search; every network call runs on a
background thread and comes back through a queued signal, so a slow or absent
network never freezes the window. Offline, the page says so in one line and
the rest of the window (the library included) works as before. The fit badge
is the planner's verdict on the file's real shapes (its GGUF header, read with
Range requests; for a transformers repository, config.json and the safetensors
headers), for this machine as the load would see it.
"""
from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QHBoxLayout, QHeaderView, QLabel, QLineEdit,
                               QListWidget, QListWidgetItem, QPushButton, QSplitter, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from engine.library import HubFile, HubOffline

from app.bridge.background import Background, error_text
from app.library.downloads import DownloadQueue, DownloadsView
from app.core.text_utils import human_bytes

FILE_COLUMNS = ("File", "Size", "Fit", "Quantization", "sha256")


class HubBrowser(QWidget):
    """Search, files with fit badges, and the download queue."""

    def __init__(self, queue: DownloadQueue | None = None, parent: QWidget | None = None, *, hardware=None) -> None:
        super().__init__(parent)
        self.hardware = hardware            # None: this machine, as the load's planner sees it
        self.queue = queue or DownloadQueue(self)
        self.files: list[HubFile] = []
        self.repo: str | None = None
        self.badges: dict[str, tuple[str, str, str]] = {}   # entry key -> (badge, summary, quant)
        self._bg = Background(self)
        self._request = 0
        self._kind = "gguf"

        lay = QVBoxLayout(self)
        row = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search the Hugging Face Hub, e.g. qwen2.5 instruct")
        self.query.returnPressed.connect(self.search)
        self.kind = QComboBox()
        self.kind.addItem("GGUF (llama.cpp)", "gguf")
        self.kind.addItem("transformers", "transformers")
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self.search)
        row.addWidget(self.query, 1)
        row.addWidget(self.kind)
        row.addWidget(self.search_button)
        lay.addLayout(row)
        self.status = QLabel("Search for a model; each file shows whether it fits this machine before you "
                             "download it.")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        split = QSplitter(Qt.Orientation.Vertical)
        self.results = QListWidget()
        self.results.currentItemChanged.connect(lambda cur, _prev: self.open_repo(cur.data(Qt.ItemDataRole.UserRole))
                                                if cur is not None else None)
        split.addWidget(self.results)
        self.table = QTableWidget(0, len(FILE_COLUMNS))
        self.table.setHorizontalHeaderLabels(FILE_COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)  # badges arrive later: they fit too
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        split.addWidget(self.table)
        self.downloads = DownloadsView(self.queue)
        split.addWidget(self.downloads)
        lay.addWidget(split, 1)
        dl = QHBoxLayout()
        dl.addStretch(1)
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(self.download_selected)
        dl.addWidget(self.download_button)
        lay.addLayout(dl)

    @property
    def busy(self) -> int:
        """Background calls in flight (tests wait on this)."""
        return self._bg.running()

    def _call(self, fn: Callable[[], object], done: Callable[[object], None], kind: str | None = None) -> None:
        self._bg.run(fn, on_done=done, on_failed=self._failed, kind=kind, name="hearth-hub")

    def _failed(self, e: BaseException) -> None:
        if isinstance(e, HubOffline):
            self.status.setText(f"Offline: {e}")
        else:
            self.status.setText(error_text(e))  # a bug still reaches the page as a message

    # -- search ---------------------------------------------------------------

    def search(self) -> None:
        from engine.library import search

        text, kind = self.query.text(), self.kind.currentData()
        self.status.setText("Searching…")
        self._call(lambda: search(text, kind), self._show_results, kind="search")  # the newest search wins

    def _show_results(self, models) -> None:
        self.results.clear()
        for m in models:
            item = QListWidgetItem(f"{m.repo_id}   ↓{m.downloads:,}  ♥{m.likes:,}")
            item.setData(Qt.ItemDataRole.UserRole, m.repo_id)
            self.results.addItem(item)
        self.status.setText(f"{len(models)} models found." if models else "No models found.")

    # -- one repository ---------------------------------------------------------

    def open_repo(self, repo_id: str) -> None:
        """List the repository's model files; their fit badges follow."""
        from engine.library import repo_files

        self.repo = repo_id
        self._request += 1
        rid, kind = self._request, self.kind.currentData()
        self.status.setText(f"Reading {repo_id}…")
        self._call(lambda: repo_files(repo_id), lambda r: self._show_files(rid, repo_id, kind, r))

    def _show_files(self, rid: int, repo_id: str, kind: str, found) -> None:
        if rid != self._request:
            return
        ggufs, hf = found
        self.files = ggufs if kind == "gguf" else hf
        self._kind = kind
        self.table.setRowCount(len(self.files))
        for r, f in enumerate(self.files):
            sha = next(iter(f.sha256.values()), "")
            name = f.name or "model weights (safetensors)"
            if len(f.parts) > 1:
                name += f" (+{len(f.parts) - 1} parts)"
            if f.projector:  # downloaded with it, and counted in its badge: the model sees images
                name += f" + {f.projector.rsplit('/', 1)[-1]} (sees images)"
            size = human_bytes(f.size + f.projector_size)
            for c, text in enumerate((name, size, "…", "…", sha[:12] or "not listed")):
                self.table.setItem(r, c, QTableWidgetItem(text))
        self.status.setText(f"{repo_id}: {len(self.files)} model file(s)" if self.files else
                            f"{repo_id} has no {'GGUF files' if kind == 'gguf' else 'safetensors weights'}.")
        for f in self.files:
            self._plan(rid, repo_id, f, kind)

    def _plan(self, rid: int, repo_id: str, f: HubFile, kind: str) -> None:
        from engine.library import fit

        import engine.loading as plan_load

        hw = self.hardware

        def work():
            machine = hw or plan_load.machine("gguf" if kind == "gguf" else "hf", torch_ok=False)
            badge, summary, spec = fit(repo_id, f, machine, kind=kind)
            return f, badge, summary, spec.quant

        self._call(work, lambda r: self._badge_ready(rid, r))

    def _badge_ready(self, rid: int, result) -> None:
        f, badge, summary, quant = result
        self.badges[self.key(f)] = (badge, summary, quant)
        if rid != self._request:
            return
        r = self.files.index(f)
        self.table.item(r, 2).setText(badge)
        self.table.item(r, 2).setToolTip(summary)
        self.table.item(r, 3).setText(quant)

    def key(self, f: HubFile) -> str:
        return f"{self.repo}/{f.name}"

    def badge_of(self, name: str) -> str:
        """The fit badge shown for a file of the open repository ('…' while planned)."""
        return self.badges.get(f"{self.repo}/{name}", ("…", "", ""))[0]

    def select_file(self, name: str) -> None:
        self.table.selectRow(next(i for i, f in enumerate(self.files) if f.name == name))

    def download_selected(self) -> int | None:
        """Queue the selected file; returns its place in the queue."""
        rows = self.table.selectionModel().selectedRows()
        if not rows or self.repo is None:
            self.status.setText("Choose a file to download first.")
            return None
        f = self.files[rows[0].row()]
        return self.queue.add(self.repo, f, self._kind)

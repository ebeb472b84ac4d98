"""The model library page: the models on disk, their figures and fit badges, and what to do with them.

A thin view of engine.models.library.Library. The list appears at once from the
headers; the fit badges (a planner run per model) are computed on a background
thread and filled in as they arrive, so the window never waits for them. Load
and Unload go through the window (its settings and engine host); Delete asks
first and never offers the bundled model; Show in folder opens the file manager.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from PySide6.QtCore import QEvent, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (QAbstractItemView, QFileDialog, QHBoxLayout, QHeaderView, QLabel, QListWidget,
                               QMessageBox, QPushButton, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from engine import HearthError
from engine.library import Library, LibraryModel, compatible_drafts, memo_dir
from engine.loading import remote_model

from app.bridge.background import Background, error_text
from app.library.library_tasks import import_files, own_settings, plan_all, scan
from app.library.servers import AddServerDialog, ServerList
from app.core.paths import data_dir
from app.core.text_utils import human_bytes
from app.ui.confirm import ask_to_delete

COLUMNS = ("Name", "Architecture", "Parameters", "Quantization", "Size", "Context", "Last used", "Fit", "Where")
FIT_COL = COLUMNS.index("Fit")
NAME_SHARE = 0.6  # a very long name takes at most this much of the table's width (the rest elides)


def params_text(n: int) -> str:
    """7615616512 -> '7.6B'; 135000000 -> '135M'."""
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    return f"{n / 1e6:.0f}M" if n >= 1e6 else (str(n) if n else "—")


def when_text(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "never"


def draft_choices(model: str) -> list[tuple[str, str]]:
    """(label, path) of the draft models on disk for the Settings choice: same vocabulary as
    ``model`` ("bundled" or a GGUF path) and at most half its size, smallest first."""
    from engine.library import bundled_model_path

    from app.core.paths import LIBRARY_FILE, data_dir

    try:
        target = str(bundled_model_path()) if model == "bundled" else model
        if not target.lower().endswith(".gguf"):
            return []
        found = compatible_drafts(target, Library(data_dir() / LIBRARY_FILE).scan())
    except HearthError:
        return []
    return [(f"{m.name} ({m.quant}, {human_bytes(m.size)})", str(m.path)) for m in found]


class LibraryView(QWidget):
    """The table of models on disk with Load, Unload, Delete and Show in folder."""

    load_requested = Signal(object)      # LibraryModel
    unload_requested = Signal()
    changed = Signal()                   # the models on disk changed (deleted, imported)
    imported = Signal(str, bool)         # what an import did (one line), and whether anything was added
    remote_load_requested = Signal(str)  # a server's model, as the settings name it (url#id)

    def __init__(self, library: Library, parent: QWidget | None = None, *, hardware=None) -> None:
        super().__init__(parent)
        self.library = library
        self.hardware = hardware          # None: this machine, as the load's planner sees it
        self.models: list[LibraryModel] = []
        self.badges: dict[str, tuple[str, str]] = {}
        self.own: dict[str, str] = {}  # model key -> a line on its own settings (shown in its name's tooltip)
        self.model_entries = dict  # each model's own settings: the dock gives the window's (Settings.models)
        self.loaded_path: str | None = None
        self.confirm: QMessageBox | None = None
        self._bg = Background(self)       # scans (a newer one supersedes) and fit badges
        self._imports = Background(self)  # imports: each one's answer counts, none supersedes another
        self._drafts: list[LibraryModel] = []
        self._select_after: str | None = None
        self._stale = True                # the table has not been filled since the disk last changed
        self.servers: ServerList | None = None  # the servers' models, in the table's last rows
        self.speech = None                # the speech models (app/library/speech_list.py), where voice is installed

        lay = QVBoxLayout(self)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)  # badges arrive later: they fit too
        # The name is what people read first: it gets its full width (see _fit_name), not the leftovers.
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        self.table.viewport().installEventFilter(self)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _i: self.load_selected())
        lay.addWidget(self.table, 1)
        row = QHBoxLayout()
        self.load_button = self._button(row, "Load", self.load_selected)
        self.unload_button = self._button(row, "Unload", self.unload_requested.emit)
        self.delete_button = self._button(row, "Delete…", self.delete_selected)
        self.folder_button = self._button(row, "Show in folder", self.show_in_folder)
        row.addStretch(1)
        self._button(row, "Add folder…", self.choose_folder)
        self.add_server_button = self._button(row, "Add server…", self.add_server)
        self._button(row, "Refresh", self.refresh)
        lay.addLayout(row)
        self.drafts_label = QLabel("Draft models for the loaded model")
        self.drafts = QListWidget()
        self.drafts.setMaximumHeight(90)
        self.drafts.setToolTip("GGUF models on disk with the loaded model's vocabulary and at most half its "
                               "size; pick one in Settings → Model → Draft model")
        lay.addWidget(self.drafts_label)
        lay.addWidget(self.drafts)
        self.status = QLabel()
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        self._update_buttons()

    @property
    def scanning(self) -> int:
        """Scans in flight (out-of-date ones included)."""
        return self._bg.running("scan")

    @property
    def importing(self) -> int:
        """Imports in flight."""
        return self._imports.running()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        if self._stale:
            self.refresh()

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt override)
        if obj is self.table.viewport() and event.type() == QEvent.Type.Resize:
            self._fit_name()
        return False

    def _fit_name(self) -> None:
        """Size the Name column: every name in full (up to NAME_SHARE of the table's width), and
        whatever room the other columns, sized to their contents, leave besides. A stretched
        Name got only those leftovers: three letters at the dock's default width."""
        t = self.table
        head = t.horizontalHeader()
        others = sum(max(t.sizeHintForColumn(c), head.sectionSizeHint(c)) for c in range(1, t.columnCount()))
        full = max(t.sizeHintForColumn(0), head.sectionSizeHint(0))
        room = t.viewport().width()
        head.resizeSection(0, max(room - others, min(full, int(room * NAME_SHARE))))

    def hideEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().hideEvent(event)
        if not event.spontaneous():  # minimised is not closed: a restore shows the table as it was
            self._stale = True  # files may come and go while nobody looks: read them again when shown

    def _button(self, row: QHBoxLayout, text: str, slot) -> QPushButton:
        b = QPushButton(text)
        b.clicked.connect(slot)
        row.addWidget(b)
        return b

    # -- listing ------------------------------------------------------------

    def refresh(self, select: str | os.PathLike[str] | None = None) -> None:
        """Re-read the models on disk on a background thread (headers, the HF cache); the table
        fills when that is done, then selects ``select``; the fit badges follow after.

        While the page is hidden nothing is read: the scan waits until it is shown. A scan
        right after each load, while the first reply streams, held the GIL long enough (the
        HF cache's imports, a planner run per model) to stall the window's event loop past
        its 100 ms budget, for a table nobody was looking at."""
        if select is not None:
            self._select_after = str(select)
        if not self.isVisible():
            self._stale = True
            self._bg.drop("scan")  # a scan already on its way is out of date: the one at show selects
            return
        self._stale = False
        if self.speech is not None:
            self.speech.refresh()
        library, loaded, entries = self.library, self.loaded_path, dict(self.model_entries())

        def listing():
            found = scan(library, loaded)
            return found, own_settings(found[0], entries, memo_dir(data_dir()))
        self._bg.run(listing, on_done=self._listed, on_failed=self._scan_failed,
                     kind="scan", name="hearth-library-scan")  # a newer scan supersedes one on its way

    def _listed(self, got) -> None:
        found, self.own = got
        self._scanned(found)

    def _scan_failed(self, e: BaseException) -> None:
        why = str(e) if isinstance(e, OSError) else error_text(e)  # a file error names its file already
        self.status.setText(f"Could not read the models on disk: {why}")
        self._scanned(([], []))

    def attach_servers(self, servers: ServerList) -> None:
        """List ``servers``' models below the ones on disk."""
        self.servers = servers
        servers.changed.connect(lambda: self._scanned((self.models, self._drafts)))
        servers.message.connect(lambda text, _ok: self.status.setText(text))

    def attach_speech(self, speech: QWidget) -> None:
        """List the speech models below the drafts; they are read again with the rest."""
        self.speech = speech
        lay = self.layout()
        lay.insertWidget(lay.indexOf(self.status), speech)

    def add_server(self) -> None:
        if self.servers is not None:
            self.server_dialog = AddServerDialog(self.servers, self)
            self.server_dialog.open()

    def _scanned(self, found: tuple[list[LibraryModel], list[LibraryModel]]) -> None:
        self.models, self._drafts = found
        remote = self.servers.rows if self.servers is not None else []
        self.table.setRowCount(len(self.models) + len(remote))
        for r, m in enumerate(self.models):
            cells = (m.name + (" · sees images" if m.projector else ""), m.architecture, params_text(m.n_params),
                     m.quant or "—",
                     human_bytes(m.size) if m.size else "—", f"{m.n_ctx:,}" if m.n_ctx else "—",
                     when_text(m.last_used), self.badges.get(m.key, ("…", ""))[0] if not m.error else "unreadable",
                     m.origin + (f" ({m.repo_id})" if m.repo_id else ""))
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                eyes = f"\nvision projector: {m.projector}" if m.projector else ""
                own = f"\n{self.own[m.key]}" if m.key in self.own else ""
                item.setToolTip(m.error or (f"{m.name}\n{m.path}{eyes}{own}" if c == 0 else str(m.path)))
                self.table.setItem(r, c, item)
            if str(m.path) == self.loaded_path:
                f = self.table.item(r, 0).font()
                f.setBold(True)
                self.table.item(r, 0).setFont(f)
        if self.servers is not None:
            self.servers.fill(self.table, len(self.models), self.loaded_path, len(COLUMNS))
        self._fit_name()
        self._show_drafts()
        if self._select_after is not None:
            self.select_path(self._select_after)
            self._select_after = None
        self._update_buttons()
        todo = [m for m in self.models if not m.error]
        if todo:
            hardware = self.hardware
            # No kind: an older scan's verdicts still count (see _badge_ready), so none supersedes another.
            self._bg.run(lambda report: plan_all(todo, hardware, report), on_done=lambda _none: None,
                         on_failed=self._fit_failed, on_progress=self._badge_ready, name="hearth-library-fit")

    def _fit_failed(self, e: BaseException) -> None:
        self.status.setText(f"Could not work out which models fit: {error_text(e)}")

    def _badge_ready(self, key: str, badge: str, summary: str) -> None:
        # An older scan's verdict is still this file's (the key is its path), and the newer scan's planning
        # may not have reached it yet: show it rather than leave "…" beside a known badge.
        self.badges[key] = (badge, summary)
        for r, m in enumerate(self.models):
            if m.key == key:
                item = self.table.item(r, FIT_COL)
                item.setText(badge)
                item.setToolTip(summary)
        self._fit_name()  # the Fit column grew or shrank with its badge

    def badge_of(self, path: str | os.PathLike[str]) -> str:
        """The fit badge shown for a model ('…' while it is being planned)."""
        return self.badges.get(str(path), ("…", ""))[0]

    def set_loaded(self, path: str | None) -> None:
        """Mark the loaded model and list its drafts."""
        self.loaded_path = path
        self.refresh()

    def _show_drafts(self) -> None:
        self.drafts.clear()
        target, found = self.loaded_path, self._drafts
        for m in found:
            self.drafts.addItem(f"{m.name} ({m.quant}, {human_bytes(m.size)}) — {m.path}")
        if not target:
            self.drafts_label.setText("Draft models: load a model to see which ones can draft for it")
        else:
            self.drafts_label.setText(f"Draft models for the loaded model: {len(found) or 'none on disk'}")

    def draft_paths(self) -> list[str]:
        """The compatible drafts listed now (paths)."""
        return [str(m.path) for m in self._drafts]

    # -- actions --------------------------------------------------------------

    def selected(self) -> LibraryModel | None:
        rows = self.table.selectionModel().selectedRows()
        return self.models[rows[0].row()] if rows and rows[0].row() < len(self.models) else None

    def selected_remote(self):
        """The selected server model: (connection, model id, context), or None."""
        rows = self.table.selectionModel().selectedRows()
        i = rows[0].row() - len(self.models) if rows else -1
        return self.servers.rows[i] if self.servers is not None and 0 <= i < len(self.servers.rows) else None

    def select_path(self, path: str | os.PathLike[str]) -> bool:
        for r, m in enumerate(self.models):
            if m.path == Path(path):
                self.table.selectRow(r)
                return True
        return False

    def _update_buttons(self) -> None:
        m, r = self.selected(), self.selected_remote()
        self.load_button.setEnabled((m is not None and not m.error) or r is not None)
        self.delete_button.setText("Forget server…" if r is not None else "Delete…")
        self.delete_button.setEnabled((m is not None and m.deletable) or r is not None)
        self.delete_button.setToolTip("" if m is None or m.deletable else
                                      "The bundled model ships with Hearth and cannot be deleted")
        self.folder_button.setEnabled(m is not None)
        self.unload_button.setEnabled(self.loaded_path is not None)

    def load_selected(self) -> None:
        m, r = self.selected(), self.selected_remote()
        if r is not None:
            self.remote_load_requested.emit(remote_model(r[0].url, r[1]))
        elif m is not None and not m.error:
            self.load_requested.emit(m)

    def delete_selected(self) -> None:
        """Ask, then delete the selected model from disk (never the bundled one)."""
        m, r = self.selected(), self.selected_remote()
        if r is not None and self.servers is not None:
            self.servers.remove(r[0].url)
            return
        if m is None or not m.deletable:
            return
        what = "its snapshot folder" if m.kind == "hf_dir" else "the file"
        self.confirm = ask_to_delete(self, "Delete model", f"Delete {m.name} ({human_bytes(m.size)})? This removes "
                                     f"{what} from disk:\n{m.path}", lambda yes, m=m: self._delete_answered(m, yes))

    def _delete_answered(self, m: LibraryModel, yes: bool) -> None:
        self.confirm = None
        if not yes:
            return
        if str(m.path) == self.loaded_path:
            self.unload_requested.emit()
        try:
            self.library.delete(m)
        except (HearthError, OSError) as e:
            self.status.setText(f"Could not delete {m.name}: {e}")
            return
        self.status.setText(f"Deleted {m.name}.")
        self.refresh()
        self.changed.emit()

    def show_in_folder(self) -> None:
        m = self.selected()
        if m is not None:
            folder = m.path if m.path.is_dir() else m.path.parent
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))

    def choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of GGUF models")
        if folder:
            self.add_folder(folder)

    def add_folder(self, folder: str) -> None:
        try:
            self.library.add_folder(folder)
        except HearthError as e:
            self.status.setText(str(e))
            return
        self.refresh()

    def import_files(self, paths: list[str]) -> None:
        """Add dropped .gguf files to the models folder on a background thread (a copy to
        another disk can take minutes); ``imported`` says what was added or why not."""
        self.status.setText(f"Adding {', '.join(Path(p).name for p in paths)}…")
        library, paths = self.library, list(paths)
        self._imports.run(lambda: import_files(library, paths), on_done=self._imported,
                          on_failed=lambda e: self._imported(([], [f"Could not add the files: {error_text(e)}"])),
                          name="hearth-import")

    def _imported(self, result: tuple[list[str], list[str]]) -> None:
        added, problems = result
        parts = ([f"Added {', '.join(Path(a).name for a in added)} to the library."] if added else []) + problems
        self.status.setText(" ".join(parts))
        self.refresh(select=added[-1] if added else None)
        if added:
            self.changed.emit()
        self.imported.emit(self.status.text(), bool(added))

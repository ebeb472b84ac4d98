"""The library's speech models (where voice is installed): the Whisper models that dictate and the
Piper voices that read aloud, each with its languages, size on disk and whether it fits this machine.

The list is read on a background thread (the Hugging Face cache, each model's files, the machine's
memory), never on the GUI thread. *Use* makes a model the one Settings → Voice names (it loads
off the GUI thread on its next use); *Delete…* asks, then removes a Hub download from the cache
(never a bundled model, never a file the user chose); *Show in folder* opens its folder.
"""
from __future__ import annotations

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QMessageBox, QPushButton,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from engine import HearthError
from engine.library import ORIGIN_HF
from engine.voice import SpeechModel

from app.bridge.background import Background, error_text
from app.core.text_utils import human_bytes
from app.ui.confirm import ask_to_delete

COLUMNS = ("Speech model", "Used for", "Languages", "Size", "Fit", "Where")
USES = {"whisper": "Dictation", "piper": "Read-aloud"}


def _listed(chosen: tuple[str, str], hardware) -> list[tuple[SpeechModel, str, str]]:
    """On a worker: each speech model on disk with its fit badge and line (the machine probed once)."""
    from engine.sizing import probe
    from engine.voice import speech_fit, speech_models_on_disk

    hw = hardware or probe()
    return [(m, *speech_fit(m, hw)) for m in speech_models_on_disk(chosen=chosen)]


class SpeechList(QWidget):
    """The speech models' table and its buttons."""

    use_requested = Signal(str, str)   # kind ("whisper" or "piper"), and what Settings → Voice calls the model

    def __init__(self, chosen, parent: QWidget | None = None, *, hardware=None) -> None:
        """``chosen``: a callable giving the (whisper, piper) Settings → Voice names now."""
        super().__init__(parent)
        self.chosen, self.hardware = chosen, hardware
        self.models: list[SpeechModel] = []
        self.confirm: QMessageBox | None = None
        self._bg = Background(self)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(QLabel("Speech models (dictation and read-aloud; pick the language and speed in "
                             "Settings → Voice)"))
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setMaximumHeight(150)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _i: self.use_selected())
        lay.addWidget(self.table)
        row = QHBoxLayout()
        for text, slot in (("Use", self.use_selected), ("Delete…", self.delete_selected),
                           ("Show in folder", self.show_in_folder)):
            b = QPushButton(text)
            b.clicked.connect(slot)
            row.addWidget(b)
        self.use_button, self.delete_button, self.folder_button = (row.itemAt(i).widget() for i in range(3))
        row.addStretch(1)
        lay.addLayout(row)
        self.status = QLabel()
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        self._update_buttons()

    @property
    def scanning(self) -> bool:
        return bool(self._bg.running("scan"))

    def refresh(self) -> None:
        """Read the speech models on disk again (on a worker); the table fills when that is done."""
        chosen, hardware = tuple(self.chosen()), self.hardware
        self._bg.run(lambda: _listed(chosen, hardware), on_done=self._fill, kind="scan",
                     on_failed=lambda e: self.status.setText(f"Could not read the speech models: {error_text(e)}"),
                     name="hearth-speech-models")

    def _fill(self, found: list[tuple[SpeechModel, str, str]]) -> None:
        self.models = [m for m, _b, _s in found]
        in_use = self._in_use()
        self.table.setRowCount(len(found))
        for r, (m, badge, line) in enumerate(found):
            use = USES[m.kind] + (" (in use)" if m in in_use else "")
            for c, text in enumerate((m.name, use, m.languages, human_bytes(m.size_bytes), badge, m.origin or "a file "
                                      "you chose")):
                item = QTableWidgetItem(text)
                item.setToolTip(line if c == COLUMNS.index("Fit") else f"{m.spec}\n{m.path}\nLicence: {m.licence}")
                if m in in_use:
                    f = item.font()
                    f.setBold(True)
                    item.setFont(f)
                self.table.setItem(r, c, item)
        self._update_buttons()

    def _in_use(self) -> list[SpeechModel]:
        whisper, piper = self.chosen()
        return [m for m in self.models if m.spec == (whisper if m.kind == "whisper" else piper)]

    def fit_of(self, spec: str, kind: str) -> str:
        """The Fit column's text for a listed model (for the tests and the screenshots)."""
        for r, m in enumerate(self.models):
            if (m.spec, m.kind) == (spec, kind):
                return self.table.item(r, COLUMNS.index("Fit")).text()
        return ""

    def selected(self) -> SpeechModel | None:
        rows = self.table.selectionModel().selectedRows()
        return self.models[rows[0].row()] if rows and rows[0].row() < len(self.models) else None

    def select(self, spec: str, kind: str) -> bool:
        for r, m in enumerate(self.models):
            if (m.spec, m.kind) == (spec, kind):
                self.table.selectRow(r)
                return True
        return False

    def _update_buttons(self) -> None:
        m = self.selected()
        self.use_button.setEnabled(m is not None and m not in self._in_use())
        self.delete_button.setEnabled(m is not None and m.deletable)
        self.delete_button.setToolTip("" if m is None or m.deletable else
                                      "Only downloads are deleted here: the bundled models ship with Hearth, and "
                                      "a file you chose is yours")
        self.folder_button.setEnabled(m is not None)

    def use_selected(self) -> None:
        m = self.selected()
        if m is not None:
            self.use_requested.emit(m.kind, m.spec)

    def delete_selected(self) -> None:
        m = self.selected()
        if m is None or not m.deletable:
            return
        where = "the Hugging Face cache" if m.origin == ORIGIN_HF else "Hearth's models folder"
        self.confirm = ask_to_delete(self, "Delete speech model", f"Delete {m.name} ({human_bytes(m.size_bytes)}) "
                                     f"from {where}?\n{m.path}", lambda yes, m=m: self._delete_answered(m, yes))

    def _delete_answered(self, m: SpeechModel, yes: bool) -> None:
        from engine.voice import delete_speech_model

        self.confirm = None
        if not yes:
            return
        if m in self._in_use():
            self.status.setText(f"{m.name} is in use: choose another in Settings → Voice first.")
            return
        try:
            delete_speech_model(m)
        except (HearthError, OSError) as e:
            self.status.setText(f"Could not delete {m.name}: {e}")
            return
        self.status.setText(f"Deleted {m.name}.")
        self.refresh()

    def show_in_folder(self) -> None:
        m = self.selected()
        if m is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(m.path if m.path.is_dir() else m.path.parent)))

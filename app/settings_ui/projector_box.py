"""The settings dialog's Vision projector box: Auto (the projector made for the model, found beside
it by its header), None, or a projector file chosen by hand."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QPushButton, QWidget

TIP = ("A vision model's projector (mmproj GGUF) lets it see images. Auto uses the one made for the model "
       "in its folder, if there is one; None loads the model text-only.")


class ProjectorBox(QWidget):
    def __init__(self, current: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.combo = QComboBox()
        self.combo.addItem("Auto", "auto")
        self.combo.addItem("None (text only)", "none")
        self.combo.setToolTip(TIP)
        lay.addWidget(self.combo, 1)
        self.choose = QPushButton("Choose…")
        self.choose.setToolTip("Pick a projector file by hand")
        self.choose.clicked.connect(self._pick)
        lay.addWidget(self.choose)
        self.set_value(current)

    def set_value(self, value: str) -> None:
        if value not in ("auto", "none") and self.combo.findData(value) < 0:
            self.combo.addItem(Path(value).name, value)
        self.combo.setCurrentIndex(max(0, self.combo.findData(value)))

    def value(self) -> str:
        """"auto", "none" or the chosen projector's path."""
        return str(self.combo.currentData())

    def _pick(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a vision projector", "", "Projector (*.gguf)")
        if path:
            self.set_value(path)

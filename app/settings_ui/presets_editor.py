"""The settings dialog's System prompts tab: add, rename, edit and remove presets,
and choose the one new conversations start with. It edits its own copy."""
from __future__ import annotations

import copy

from PySide6.QtWidgets import (QComboBox, QFormLayout, QHBoxLayout, QLineEdit, QListWidget, QPlainTextEdit,
                               QPushButton, QVBoxLayout, QWidget)


class PresetsEditor(QWidget):
    def __init__(self, presets: list[dict[str, str]], default: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._presets = copy.deepcopy(presets)
        self._showing = False  # filling the editors from the list is not an edit
        lay = QHBoxLayout(self)
        left = QVBoxLayout()
        self.preset_list = QListWidget()
        left.addWidget(self.preset_list, 1)
        row = QHBoxLayout()
        add, remove = QPushButton("Add"), QPushButton("Remove")
        add.clicked.connect(self._add_preset)
        remove.clicked.connect(self._remove_preset)
        row.addWidget(add)
        row.addWidget(remove)
        left.addLayout(row)
        lay.addLayout(left, 1)
        right = QFormLayout()
        self.preset_name = QLineEdit()
        self.preset_text = QPlainTextEdit()
        self.default_preset = QComboBox()
        right.addRow("Name", self.preset_name)
        right.addRow("Prompt", self.preset_text)
        right.addRow("New conversations use", self.default_preset)
        lay.addLayout(right, 2)
        self.preset_list.currentRowChanged.connect(self._show_preset)
        self.preset_name.textEdited.connect(self._preset_edited)
        self.preset_text.textChanged.connect(self._preset_edited)
        self._fill_presets(default)

    def presets(self) -> list[dict[str, str]]:
        """The presets as edited (a copy)."""
        return copy.deepcopy(self._presets)

    def default_name(self) -> str:
        return self.default_preset.currentText()

    def _fill_presets(self, default: str) -> None:
        self.preset_list.blockSignals(True)
        self.preset_list.clear()
        self.preset_list.addItems([p["name"] for p in self._presets])
        self.preset_list.blockSignals(False)
        self.default_preset.clear()
        self.default_preset.addItems([p["name"] for p in self._presets])
        idx = self.default_preset.findText(default)
        self.default_preset.setCurrentIndex(max(idx, 0))
        if self._presets:
            self.preset_list.setCurrentRow(0)
            self._show_preset(0)

    def _show_preset(self, row: int) -> None:
        self._showing = True
        ok = 0 <= row < len(self._presets)
        self.preset_name.setText(self._presets[row]["name"] if ok else "")
        self.preset_text.setPlainText(self._presets[row]["prompt"] if ok else "")
        self._showing = False

    def _preset_edited(self) -> None:
        row = self.preset_list.currentRow()
        if self._showing or not 0 <= row < len(self._presets):
            return
        old = self._presets[row]["name"]
        self._presets[row] = {"name": self.preset_name.text(), "prompt": self.preset_text.toPlainText()}
        self.preset_list.item(row).setText(self.preset_name.text())
        i = self.default_preset.findText(old)
        if i >= 0:
            self.default_preset.setItemText(i, self.preset_name.text())

    def _add_preset(self) -> None:
        names = {p["name"] for p in self._presets}
        n = 1
        while f"Preset {n}" in names:
            n += 1
        self._presets.append({"name": f"Preset {n}", "prompt": ""})
        self._fill_presets(self.default_preset.currentText())
        self.preset_list.setCurrentRow(len(self._presets) - 1)

    def _remove_preset(self) -> None:
        row = self.preset_list.currentRow()
        if 0 <= row < len(self._presets) and len(self._presets) > 1:
            del self._presets[row]
            self._fill_presets(self.default_preset.currentText())

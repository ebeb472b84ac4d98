"""Settings → Voice: the speech models (bundled, or a folder / voice file), the language heard, the
voice's speed, reading every reply aloud, and hands-free turns. Without voice installed the tab says
how to install it and keeps the settings as they were."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
                               QPushButton, QWidget)

from engine import HearthError
from engine.voice import BUNDLED, SETUP_HINT, on_hub, piper_voice, voice_installed, whisper_model

from app.core import voice_settings
from app.core.settings import Settings, SettingsError
from app.core.text_utils import human_bytes

MULTILINGUAL_HINT = ("type Systran/faster-whisper-base to download it from the Hub, or run "
                     "python -m engine models fetch-whisper-base and choose it in the model library")


class VoiceTab(QWidget):
    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._orig = dict(settings.voice)
        form = QFormLayout(self)
        self.installed = voice_installed()
        if not self.installed:
            note = QLabel(f"Voice is not installed. To dictate and hear replies read aloud, run:\n{SETUP_HINT}")
            note.setWordWrap(True)
            note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            form.addRow(note)
            return
        v = settings.voice
        self.whisper, self.whisper_info = QComboBox(), QLabel()
        self.piper, self.piper_info = QComboBox(), QLabel()
        for combo, info, current, pick, kind in (
                (self.whisper, self.whisper_info, v["whisper"], self._pick_whisper, "Speech to text"),
                (self.piper, self.piper_info, v["piper"], self._pick_piper, "Voice")):
            combo.addItem("Bundled", BUNDLED)
            combo.setEditable(True)  # a Hub repository may be typed in (downloaded on first use)
            combo.lineEdit().editingFinished.connect(self._describe)
            if current != BUNDLED:
                combo.addItem(current, current)
                combo.setCurrentIndex(1)
            combo.currentIndexChanged.connect(lambda _i: self._describe())
            row = QHBoxLayout()
            row.addWidget(combo, 1)
            choose = QPushButton("Choose…")
            choose.clicked.connect(pick)
            row.addWidget(choose)
            form.addRow(kind, row)
            info.setWordWrap(True)
            info.setObjectName("muted")
            form.addRow("", info)
        self.language = QComboBox()
        for code, name in voice_settings.LANGUAGES.items():
            self.language.addItem(name, code)
        self.language.setCurrentIndex(list(voice_settings.LANGUAGES).index(v["language"]))
        self.language.setToolTip("The language you dictate in; Detect works per segment on a multilingual model")
        form.addRow("Language", self.language)
        self.language.currentIndexChanged.connect(lambda _i: self._describe())
        self.speed = QDoubleSpinBox()
        self.speed.setRange(*voice_settings.SPEEDS)
        self.speed.setSingleStep(0.1)
        self.speed.setSuffix("×")
        self.speed.setValue(float(v["speed"]))
        form.addRow("Speed", self.speed)
        self.speak_replies = QCheckBox("Read every reply aloud as it is written")
        self.speak_replies.setChecked(v["speak_replies"])
        form.addRow("", self.speak_replies)
        self.hands_free = QCheckBox("Hands-free: the microphone button starts a spoken conversation "
                                    "(send when you pause, hear the reply, speak again)")
        self.hands_free.setChecked(v["hands_free"])
        form.addRow("", self.hands_free)
        self._describe()

    def _pick_whisper(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A faster-whisper model folder (model.bin, config.json)")
        if folder:
            self._add(self.whisper, folder)

    def _pick_piper(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A Piper voice", "", "Piper voices (*.onnx)")
        if path:
            self._add(self.piper, path)

    def _add(self, combo: QComboBox, path: str) -> None:
        if combo.findData(path) < 0:
            combo.addItem(path, path)
        combo.setCurrentIndex(combo.findData(path))

    @staticmethod
    def _spec(combo: QComboBox) -> str:
        """The combo's model: an item's, or what was typed (a path or a Hub repository)."""
        typed = combo.currentText().strip()
        return combo.currentData() if combo.findText(typed) >= 0 and combo.currentData() else typed

    def _describe(self) -> None:
        """Each model's languages, size on disk and licence, or why it cannot be used."""
        for combo, info, find in ((self.whisper, self.whisper_info, whisper_model),
                                  (self.piper, self.piper_info, piper_voice)):
            spec = self._spec(combo)
            if on_hub(spec):  # never downloaded here, on the GUI thread
                info.setText(f"{spec}: downloaded from the Hugging Face Hub the first time it is used")
                continue
            try:
                m = find(spec)
                info.setText(f"{m.name} · {m.languages} · {human_bytes(m.size_bytes)} · {m.licence}")
            except HearthError as e:
                info.setText(str(e))
                continue
            chosen = self.language.currentData() if hasattr(self, "language") else "auto"
            if m.kind == "whisper" and m.languages == "English only" and chosen not in ("auto", "en"):
                info.setText(f"{info.text()}\nIt hears English only: for {self.language.currentText()}, choose a "
                             f"multilingual model ({MULTILINGUAL_HINT}).")

    def values(self) -> dict:
        if not self.installed:
            return {"voice": self._orig}
        for combo, find in ((self.whisper, whisper_model), (self.piper, piper_voice)):
            try:
                if not on_hub(self._spec(combo)):
                    find(self._spec(combo))
            except HearthError as e:
                raise SettingsError(f"voice: {e}") from None
        return {"voice": {"whisper": self._spec(self.whisper), "piper": self._spec(self.piper),
                          "language": self.language.currentData(), "speed": round(self.speed.value(), 2),
                          "speak_replies": self.speak_replies.isChecked(),
                          "hands_free": self.hands_free.isChecked()}}


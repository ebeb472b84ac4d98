"""One row per setting in Settings → Sampling: its value, the layer it comes from, and a reset to the layer
below (engine/library/model_settings.py says what the layers are)."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QDoubleSpinBox, QHBoxLayout, QLabel, QSpinBox, QToolButton, QWidget

# key -> (kind, low, high, step or decimals, the "none" checkbox's label (None: the value is always a number),
#         the number shown while "none" is ticked)
KNOBS: dict[str, tuple[str, float, float, float, str | None, float]] = {
    "temperature": ("float", 0.0, 5.0, 0.05, None, 0),
    "top_p": ("float", 0.01, 1.0, 0.01, None, 0),
    "top_k": ("int", 0, 100000, 1, None, 0),
    "min_p": ("float", 0.0, 0.99, 0.01, None, 0),
    "repeat_penalty": ("float", 0.05, 5.0, 0.05, None, 0),
    "presence_penalty": ("float", -2.0, 2.0, 0.1, None, 0),
    "frequency_penalty": ("float", -2.0, 2.0, 0.1, None, 0),
    "penalty_last_n": ("int", -1, 1 << 20, 1, None, 0),
    "max_tokens": ("int", 1, 1 << 20, 1, "Until the model stops", 4096),
    "reasoning_budget": ("int", 0, 1 << 20, 1, "No limit", 1024),
    "seed": ("int", 0, 2**31 - 1, 1, "Random", 0),
}
LABELS = {"top_p": "Top-p", "top_k": "Top-k", "min_p": "Min-p", "max_tokens": "Max tokens",
          "reasoning_budget": "Thinking budget"}
TIPS = {"temperature": "0 = always the most likely token (greedy)", "top_k": "0 disables",
        "top_p": "1.0 disables", "min_p": "0 disables", "repeat_penalty": "1.0 disables",
        "penalty_last_n": "how many recent tokens the penalties look at; -1 = all",
        "max_tokens": "the longest reply, in tokens (a reply that reaches it is marked incomplete); unticked: the "
                      "reply ends when the model ends it or the context is full",
        "reasoning_budget": "The most tokens a thinking model may reason for in one reply; then its reasoning is "
                            "closed and it answers (the reply's notes say so)"}


def label_of(key: str) -> str:
    return LABELS.get(key, key.replace("_", " ").capitalize())


class ValueEdit(QWidget):
    """A knob's value: a spin box, and for an optional one a checkbox meaning "none" (``value()`` None)."""

    edited = Signal()

    def __init__(self, key: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        kind, lo, hi, step, none_label, self._fallback = KNOBS[key]
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.none: QCheckBox | None = QCheckBox(none_label) if none_label else None
        if kind == "float":
            dspin = QDoubleSpinBox()
            dspin.setDecimals(2)
            dspin.setSingleStep(step)
            dspin.setRange(lo, hi)
            self.spin: QSpinBox | QDoubleSpinBox = dspin
        else:
            ispin = QSpinBox()
            ispin.setRange(int(lo), int(hi))
            self.spin = ispin
        self.spin.setToolTip(TIPS.get(key, ""))
        if self.none is not None:
            self.none.setToolTip(TIPS.get(key, ""))
            self.none.toggled.connect(lambda on: (self.spin.setEnabled(not on), self.edited.emit()))
            lay.addWidget(self.none)
        lay.addWidget(self.spin, 1)
        self.spin.valueChanged.connect(lambda _v: self.edited.emit())

    def value(self) -> Any:
        if self.none is not None and self.none.isChecked():
            return None
        v = self.spin.value()
        return round(v, 4) if isinstance(self.spin, QDoubleSpinBox) else int(v)

    def set_value(self, v: Any) -> None:
        """Show ``v`` (None: the "none" box ticked) without it counting as an edit."""
        self.blockSignals(True)
        if self.none is not None:
            self.none.setChecked(v is None)
            self.spin.setEnabled(v is not None)
        self.spin.setValue(v if v is not None else self._fallback)  # type: ignore[arg-type]  # int or float
        self.blockSignals(False)


class LayerRow(QWidget):
    """A setting's value (:class:`ValueEdit`), the layer it comes from, and a reset to the layer below."""

    def __init__(self, key: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.key = key
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.edit = ValueEdit(key)
        self.layer = QLabel()
        self.layer.setMinimumWidth(180)
        self.layer.setStyleSheet("color: palette(mid);")
        self.reset = QToolButton()
        self.reset.setText("↺")
        self.reset.setAutoRaise(True)
        lay.addWidget(self.edit, 3)
        lay.addWidget(self.layer, 2)
        lay.addWidget(self.reset)

    def display(self, value: Any, layer: str, below: str | None) -> None:
        """Show ``value`` from ``layer`` (words); ``below``: what a reset gives (None: nothing to reset)."""
        self.edit.set_value(value)
        self.layer.setText(layer)
        self.reset.setEnabled(below is not None)
        self.reset.setToolTip(f"Back to {below}" if below is not None else "Nothing set here to reset")

"""The settings dialog's Sampling tab: one spin box per knob, the seed, and a reset."""
from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QCheckBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QPushButton, QSpinBox, QWidget

from .settings import _default_sampling

TIPS = {"temperature": "0 = always the most likely token (greedy)", "top_k": "0 disables",
        "top_p": "1.0 disables", "min_p": "0 disables", "repeat_penalty": "1.0 disables",
        "penalty_last_n": "how many recent tokens the penalties look at; -1 = all",
        "max_tokens": "the longest reply, in tokens"}
LABELS = {"top_p": "Top-p", "top_k": "Top-k", "min_p": "Min-p", "max_tokens": "Max tokens"}


def _dspin(lo: float, hi: float, step: float, value: float, decimals: int = 2) -> QDoubleSpinBox:
    sp = QDoubleSpinBox()
    sp.setRange(lo, hi)
    sp.setSingleStep(step)
    sp.setDecimals(decimals)
    sp.setValue(value)
    return sp


def _ispin(lo: int, hi: int, value: int) -> QSpinBox:
    sp = QSpinBox()
    sp.setRange(lo, hi)
    sp.setValue(value)
    return sp


class SamplingForm(QWidget):
    """Edits the settings' sampling dict; ``values()`` gives it back."""

    def __init__(self, sampling: dict[str, Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        v = {**_default_sampling(), **sampling}
        self.sp = {
            "temperature": _dspin(0.0, 5.0, 0.05, v["temperature"]),
            "top_p": _dspin(0.01, 1.0, 0.01, v["top_p"]),
            "top_k": _ispin(0, 100000, v["top_k"]),
            "min_p": _dspin(0.0, 0.99, 0.01, v["min_p"]),
            "repeat_penalty": _dspin(0.05, 5.0, 0.05, v["repeat_penalty"]),
            "presence_penalty": _dspin(-2.0, 2.0, 0.1, v["presence_penalty"]),
            "frequency_penalty": _dspin(-2.0, 2.0, 0.1, v["frequency_penalty"]),
            "penalty_last_n": _ispin(-1, 1 << 20, v["penalty_last_n"]),
            "max_tokens": _ispin(1, 1 << 20, v["max_tokens"]),
        }
        for k, widget in self.sp.items():
            widget.setToolTip(TIPS.get(k, ""))
            form.addRow(LABELS.get(k, k.replace("_", " ").capitalize()), widget)
        seed_row = QHBoxLayout()
        self.seed_random = QCheckBox("Random")
        self.seed_random.setChecked(v["seed"] is None)
        self.seed = _ispin(0, 2**31 - 1, v["seed"] or 0)
        self.seed.setEnabled(v["seed"] is not None)
        self.seed_random.toggled.connect(lambda on: self.seed.setEnabled(not on))
        seed_row.addWidget(self.seed_random)
        seed_row.addWidget(self.seed, 1)
        form.addRow("Seed", seed_row)
        reset = QPushButton("Reset to defaults")
        reset.clicked.connect(self.reset)
        form.addRow("", reset)

    def values(self) -> dict[str, Any]:
        """The sampling dict as edited (floats rounded to what the spin boxes show)."""
        sampling = {k: (w.value() if isinstance(w, QSpinBox) else round(w.value(), 4))
                    for k, w in self.sp.items()}
        sampling["seed"] = None if self.seed_random.isChecked() else self.seed.value()
        return sampling

    def reset(self) -> None:
        """Put every knob back to the engine's default."""
        d = _default_sampling()
        for k, widget in self.sp.items():
            widget.setValue(d[k])
        self.seed_random.setChecked(d["seed"] is None)

"""The settings dialog's Sampling tab: one spin box per knob, the seed, what to do when a
chat outgrows the context, and a reset."""
from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QPushButton,
                               QSpinBox, QWidget)

from app.core.settings import DEFAULT_CONTEXT_POLICY, _default_sampling

TIPS = {"temperature": "0 = always the most likely token (greedy)", "top_k": "0 disables",
        "top_p": "1.0 disables", "min_p": "0 disables", "repeat_penalty": "1.0 disables",
        "penalty_last_n": "how many recent tokens the penalties look at; -1 = all",
        "max_tokens": "the longest reply, in tokens (a reply that reaches it is marked incomplete)"}
LABELS = {"top_p": "Top-p", "top_k": "Top-k", "min_p": "Min-p", "max_tokens": "Max tokens"}
CONTEXT_POLICY_LABELS = {"drop_oldest": "Drop the oldest messages (keep the system prompt)",
                         "stop": "Stop and say so"}


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
    """Edits the settings' sampling dict (``values()`` gives it back) and the context
    policy (``context_policy()``)."""

    def __init__(self, sampling: dict[str, Any], context_policy: str = DEFAULT_CONTEXT_POLICY,
                 parent: QWidget | None = None) -> None:
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
        }
        for k, widget in self.sp.items():
            widget.setToolTip(TIPS.get(k, ""))
            form.addRow(LABELS.get(k, k.replace("_", " ").capitalize()), widget)
        # A reply runs until the model stops or the context is full, unless it is given a cap.
        length_row = QHBoxLayout()
        self.length_none = QCheckBox("Until the model stops")
        self.length_none.setChecked(v["max_tokens"] is None)
        self.max_tokens = _ispin(1, 1 << 20, v["max_tokens"] or 4096)
        self.max_tokens.setEnabled(v["max_tokens"] is not None)
        self.max_tokens.setToolTip(TIPS["max_tokens"])
        self.length_none.setToolTip("No cap: the reply ends when the model ends it or the context is full")
        self.length_none.toggled.connect(lambda on: self.max_tokens.setEnabled(not on))
        length_row.addWidget(self.length_none)
        length_row.addWidget(self.max_tokens, 1)
        form.addRow("Max tokens", length_row)
        seed_row = QHBoxLayout()
        self.seed_random = QCheckBox("Random")
        self.seed_random.setChecked(v["seed"] is None)
        self.seed = _ispin(0, 2**31 - 1, v["seed"] or 0)
        self.seed.setEnabled(v["seed"] is not None)
        self.seed_random.toggled.connect(lambda on: self.seed.setEnabled(not on))
        seed_row.addWidget(self.seed_random)
        seed_row.addWidget(self.seed, 1)
        form.addRow("Seed", seed_row)
        # A thinking model's reasoning, at most this many tokens per reply (then it is told to answer).
        budget_row = QHBoxLayout()
        self.budget_none = QCheckBox("No limit")
        self.budget_none.setChecked(v.get("reasoning_budget") is None)
        self.budget = _ispin(0, 1 << 20, v.get("reasoning_budget") or 1024)
        self.budget.setEnabled(v.get("reasoning_budget") is not None)
        self.budget.setToolTip("The most tokens a thinking model may reason for in one reply; then its "
                               "reasoning is closed and it answers (the reply's notes say so)")
        self.budget_none.toggled.connect(lambda on: self.budget.setEnabled(not on))
        budget_row.addWidget(self.budget_none)
        budget_row.addWidget(self.budget, 1)
        form.addRow("Thinking budget", budget_row)
        self.policy = QComboBox()
        for key, label in CONTEXT_POLICY_LABELS.items():
            self.policy.addItem(label, key)
        self.policy.setCurrentIndex(max(0, self.policy.findData(context_policy)))
        self.policy.setToolTip("A long conversation can outgrow the model's context window. Dropping the "
                               "oldest messages lets it go on (the chat marks where the model's view begins); "
                               "stopping refuses the next message and keeps it in the input box.")
        form.addRow("When a chat outgrows the context", self.policy)
        reset = QPushButton("Reset to defaults")
        reset.clicked.connect(self.reset)
        form.addRow("", reset)

    def values(self) -> dict[str, Any]:
        """The sampling dict as edited (floats rounded to what the spin boxes show)."""
        sampling = {k: (w.value() if isinstance(w, QSpinBox) else round(w.value(), 4))
                    for k, w in self.sp.items()}
        sampling["max_tokens"] = None if self.length_none.isChecked() else self.max_tokens.value()
        sampling["seed"] = None if self.seed_random.isChecked() else self.seed.value()
        sampling["reasoning_budget"] = None if self.budget_none.isChecked() else self.budget.value()
        return sampling

    def context_policy(self) -> str:
        """The chosen context policy ("drop_oldest" or "stop")."""
        return self.policy.currentData()

    def reset(self) -> None:
        """Put every knob back to the engine's default."""
        d = _default_sampling()
        for k, widget in self.sp.items():
            widget.setValue(d[k])
        self.seed_random.setChecked(d["seed"] is None)
        self.length_none.setChecked(d["max_tokens"] is None)
        self.budget_none.setChecked(True)
        self.policy.setCurrentIndex(self.policy.findData(DEFAULT_CONTEXT_POLICY))

"""The Think control beside the input box: thinking on or off, or how hard (gpt-oss's effort).

It is shown only where the loaded model's chat template offers one
(``describe().think``, an engine.formats.ThinkControl); the window remembers the
choice per conversation and shows the model's default where none was made.
A switch (``enable_thinking``, ``thinking``), a budget (Seed-OSS: unlimited or
off) and a system-prompt flag are a check box; an effort is a list.
"""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QWidget

from engine.reply_formats import ThinkControl


def effective(think: ThinkControl | None, choice: Any) -> Any:
    """The value a reply uses: the conversation's choice if the model offers it, else its default."""
    if think is None:
        return None
    if choice is not None and (choice in think.choices or (think.kind == "budget" and isinstance(choice, int)
                                                          and not isinstance(choice, bool))):
        return choice
    return think.default if think.default is not None else think.choices[0]


class ThinkBox(QWidget):
    """The control; ``chosen`` says what the user picked (a value of ``ThinkControl.choices``)."""

    chosen = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.think: ThinkControl | None = None
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.check = QCheckBox("Think")
        self.check.toggled.connect(self._checked)
        self.label = QLabel("Thinking")
        self.combo = QComboBox()
        self.combo.activated.connect(self._picked)
        for w in (self.check, self.label, self.combo):
            lay.addWidget(w)
        self._quiet = False
        self.show_for(None, None)

    def value(self) -> Any:
        """What the control shows now (None while hidden)."""
        if self.think is None:
            return None
        if self.think.kind == "effort":
            return self.combo.currentData()
        return self.think.choices[0 if self.check.isChecked() else 1]

    def show_for(self, think: ThinkControl | None, choice: Any) -> None:
        """Show ``think``'s control (hide it for None) with the conversation's ``choice``."""
        self.think = think
        self.setVisible(think is not None)
        if think is None:
            return
        value = effective(think, choice)
        effort = think.kind == "effort"
        self.check.setVisible(not effort)
        self.label.setVisible(effort)
        self.combo.setVisible(effort)
        default = think.default if think.default is not None else think.choices[0]
        self._quiet = True
        if effort:
            self.combo.clear()
            for c in think.choices:
                self.combo.addItem(f"{c}{' (default)' if c == default else ''}", c)
            self.combo.setCurrentIndex(list(think.choices).index(value))
            self.combo.setToolTip("How much the model reasons before it answers (its template's "
                                  f"{think.variable}); remembered for this conversation")
        else:
            self.check.setChecked(value != think.choices[1])
            on = "on" if default != think.choices[1] else "off"
            how = (f"its template's {think.variable}" if think.variable else
                   f"{' or '.join(map(str, think.choices))} in the system prompt")
            self.check.setToolTip(f"Let the model think before it answers ({how}; the model's default: {on}); "
                                  "remembered for this conversation")
        self._quiet = False

    def _checked(self, _on: bool) -> None:
        if not self._quiet and self.think is not None:
            self.chosen.emit(self.value())

    def _picked(self, _index: int) -> None:
        if not self._quiet and self.think is not None:
            self.chosen.emit(self.value())

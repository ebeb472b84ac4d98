"""Chat → This chat's settings: a chat's own sampling and reply length, over its model's.

Each knob shows the value a reply in this chat gets and the layer it comes from (Hearth's defaults, the
model's recommendation, yours for the model, this chat's); changing one makes it this chat's, and ↺ goes
back to the layer below. A chat's own settings stay with the chat, whichever model is loaded.
"""
from __future__ import annotations

from typing import Any, Callable

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QVBoxLayout, QWidget

from engine.library import SAMPLING_KEYS, Layered

from app.settings_ui.layer_rows import LayerRow, label_of


def _shown(v: Any) -> str:
    return "none" if v is None else str(v)


class ChatSettingsDialog(QDialog):
    """Edits a chat's own settings; ``layers(chat)`` gives the layers for a candidate set of them."""

    def __init__(self, title: str, chat: dict[str, Any], layers: Callable[[dict[str, Any]], Layered],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"This chat's settings — {title}")
        self.chat = dict(chat)
        self._layers = layers
        lay = QVBoxLayout(self)
        intro = QLabel("A value set here is this chat's own: it stays with the chat whichever model is loaded. "
                       "↺ goes back to the model's, yours for it, or Hearth's.")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        form = QFormLayout()
        self.rows = {k: LayerRow(k) for k in SAMPLING_KEYS}
        for k, row in self.rows.items():
            form.addRow(label_of(k), row)
            row.edit.edited.connect(lambda k=k: self._edited(k))
            row.reset.clicked.connect(lambda _c=False, k=k: self._reset(k))
        lay.addLayout(form)
        box = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        box.accepted.connect(self.accept)
        box.rejected.connect(self.reject)
        lay.addWidget(box)
        self.refresh()

    def refresh(self) -> None:
        got = self._layers(self.chat)
        for k, row in self.rows.items():
            under = self._layers({c: v for c, v in self.chat.items() if c != k})
            below = f"{under.label(k)}: {_shown(under.values[k])}" if k in self.chat else None
            row.display(got.values[k], got.label(k), below)

    def _edited(self, key: str) -> None:
        self.chat[key] = self.rows[key].edit.value()
        self.refresh()

    def _reset(self, key: str) -> None:
        self.chat.pop(key, None)
        self.refresh()

    def layer_of(self, key: str) -> str:
        return self.rows[key].layer.text()

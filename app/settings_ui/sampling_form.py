"""The settings dialog's Sampling tab: each knob with the layer its value comes from and a reset to the layer
below, for the loaded model or for every model; the model's own system prompt, example turns, Think default,
context and tools; importing and exporting a model's settings; and what to do when a chat outgrows the context.

The layers (engine/library/model_settings.py): Hearth's defaults (the engine's, as changed here for every
model) < the model's own recommendations (its GGUF's general.sampling keys, its generation_config.json) <
yours for this model < a chat's own (Chat → This chat's settings).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QButtonGroup, QComboBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel, QPushButton,
                               QRadioButton, QVBoxLayout, QWidget)

from engine import HearthError, atomic_write
from engine.library import LAYER_LABELS, SAMPLING_KEYS, default_sampling, export_preset, layered, read_preset_file
from engine.reply_formats import ThinkControl

from app.core.context_costs import POLICY_LABELS, policy_cost
from app.core.model_defaults import NO_MODEL, ModelIdentity
from app.core.settings import DEFAULT_CONTEXT_POLICY
from app.settings_ui.layer_rows import LayerRow, label_of
from app.settings_ui.model_own_box import ModelOwnBox

EVERY_MODEL = "yours for every model"
PRESET_FILTER = "Model settings (*.json Modelfile *.Modelfile *.modelfile);;All files (*)"


def _shown(v: Any) -> str:
    return "none" if v is None else str(v)


class SamplingForm(QWidget):
    """Edits Hearth's defaults (``values()``: the settings' sampling dict), the loaded model's own settings
    (``model_values()``) and the context policy (``context_policy()``)."""

    def __init__(self, sampling: dict[str, Any], context_policy: str = DEFAULT_CONTEXT_POLICY, *,
                 identity: ModelIdentity = NO_MODEL, yours: dict[str, Any] | None = None,
                 think: ThinkControl | None = None, servers: list[str] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.identity = identity
        self.hearth = {**default_sampling(), **sampling}
        mine = dict(yours or {})
        self.yours = {k: v for k, v in mine.items() if k in SAMPLING_KEYS}
        page = QVBoxLayout(self)  # word-wrapped notes above and below the form: a form row would size them wrong
        form = QFormLayout()
        scope = QHBoxLayout()
        self.for_model = QRadioButton(f"This model: {identity.name}" if identity.key else "This model")
        self.for_model.setEnabled(identity.key is not None)
        self.for_model.setToolTip("Kept with the model's file (by its SHA-256): a renamed or moved file keeps them"
                                  if identity.key else "No model is loaded yet")
        self.for_all = QRadioButton("Every model (Hearth's defaults)")
        self._scope = QButtonGroup(self)
        for rb in (self.for_model, self.for_all):
            self._scope.addButton(rb)
            scope.addWidget(rb)
        scope.addStretch(1)
        scope.insertWidget(0, QLabel("Settings for"))
        page.addLayout(scope)
        self.source = QLabel()
        self.source.setWordWrap(True)
        page.addWidget(self.source)
        page.addLayout(form)
        self.rows = {k: LayerRow(k) for k in SAMPLING_KEYS}
        for k, row in self.rows.items():
            form.addRow(label_of(k), row)
            row.edit.edited.connect(lambda k=k: self._edited(k))
            row.reset.clicked.connect(lambda _c=False, k=k: self._reset_one(k))
        self.policy = QComboBox()
        for key, label in POLICY_LABELS.items():
            self.policy.addItem(label, key)
            self.policy.setItemData(self.policy.count() - 1, policy_cost(key), Qt.ItemDataRole.ToolTipRole)
        self.policy.setToolTip("A long conversation can outgrow the model's context window. Every policy keeps "
                               "every message in the chat (the chat marks where the model's view begins) and "
                               "never leaves out the system prompt or a pinned message.")
        self.policy_cost = QLabel()  # what the chosen policy costs, measured
        self.policy_cost.setWordWrap(True)
        self.policy_cost.setObjectName("muted")
        self.policy.currentIndexChanged.connect(lambda _i: self.policy_cost.setText(policy_cost(self.context_policy())))
        self.policy.setCurrentIndex(max(0, self.policy.findData(context_policy)))
        self.policy_cost.setText(policy_cost(self.context_policy()))
        form.addRow("When a chat outgrows the context", self.policy)
        form.addRow("", self.policy_cost)
        buttons = QHBoxLayout()
        self.reset_button = QPushButton("Reset to defaults")
        self.reset_button.clicked.connect(self.reset)
        self.import_button = QPushButton("Import…")
        self.import_button.setToolTip("An Ollama Modelfile, an LM Studio preset or a file Hearth exported")
        self.import_button.clicked.connect(self._import)
        self.export_button = QPushButton("Export…")
        self.export_button.clicked.connect(self._export)
        for b in (self.reset_button, self.import_button, self.export_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        page.addLayout(buttons)
        self.note = QLabel()
        self.note.setWordWrap(True)
        page.addWidget(self.note)
        self.own = ModelOwnBox({k: v for k, v in mine.items() if k not in SAMPLING_KEYS}, think, servers or [])
        page.addWidget(self.own)
        page.addStretch(1)
        (self.for_model if identity.key else self.for_all).setChecked(True)
        self._scope.buttonToggled.connect(lambda _b, on: self.refresh() if on else None)
        self.refresh()

    @property
    def model_scope(self) -> bool:
        return self.for_model.isChecked()

    # -- showing the layers -----------------------------------------------------------

    def refresh(self) -> None:
        """Show every knob's value and layer in the chosen scope."""
        model = self.model_scope
        rec = self.identity.recommended
        self.own.setVisible(model)
        self.import_button.setEnabled(model)
        self.export_button.setEnabled(model)
        if model:
            where = f" from {rec.source}" if rec.source else " (it carries none)"
            notes = "".join(f"<br>• {n}" for n in rec.notes)
            self.source.setText(f"The model's recommendations are read{where}. Change a value to make it yours "
                                f"for this model; ↺ goes back to the layer below.{notes}")
        else:
            self.source.setText("Used by every model where the model recommends nothing and you set nothing "
                                "for it; ↺ goes back to the engine's own value.")
        for k in SAMPLING_KEYS:
            self._show(k)

    def _show(self, key: str) -> None:
        row = self.rows[key]
        if self.model_scope:
            got = layered(self.hearth, self.identity.recommended, self.yours)
            under = layered(self.hearth, self.identity.recommended, {k: v for k, v in self.yours.items() if k != key})
            below = f"{under.label(key)}: {_shown(under.values[key])}" if key in self.yours else None
            label = got.label(key)
            if got.layers[key] == "hearth" and got.values[key] != default_sampling()[key]:
                label = EVERY_MODEL  # Hearth's default as the user set it for every model
            row.display(got.values[key], label, below)
        else:
            engine = default_sampling()[key]
            changed = self.hearth[key] != engine
            row.display(self.hearth[key], EVERY_MODEL if changed else LAYER_LABELS["hearth"],
                        f"the engine's own: {_shown(engine)}" if changed else None)

    def layer_of(self, key: str) -> str:
        """The layer ``key``'s shown value comes from, in words (what the row says)."""
        return self.rows[key].layer.text()

    # -- editing --------------------------------------------------------------------------

    def _edited(self, key: str) -> None:
        value = self.rows[key].edit.value()
        (self.yours if self.model_scope else self.hearth)[key] = value
        self._show(key)

    def _reset_one(self, key: str) -> None:
        if self.model_scope:
            self.yours.pop(key, None)
        else:
            self.hearth[key] = default_sampling()[key]
        self._show(key)

    def reset(self) -> None:
        """Every knob back to the layer below this scope (for this model: none of yours; for every model: the
        engine's own), and the context policy to its default."""
        if self.model_scope:
            self.yours.clear()
            self.own.set_values({})
        else:
            self.hearth = default_sampling()
            self.policy.setCurrentIndex(self.policy.findData(DEFAULT_CONTEXT_POLICY))
        self.refresh()

    def import_file(self, path: Path) -> bool:
        """Take a preset file's settings as yours for this model. A file that cannot be imported changes
        nothing and says why in one line (under the buttons); returns whether it was imported."""
        try:
            preset = read_preset_file(path)
        except HearthError as e:
            self.note.setText(f"<span style='color:#d9480f'>{Path(path).name}: {e}. Nothing was changed.</span>")
            return False
        self.yours.update({k: v for k, v in preset.values.items() if k in SAMPLING_KEYS})
        self.own.set_values({**self.own.values(), **{k: v for k, v in preset.values.items() if k not in SAMPLING_KEYS}})
        left = "; ".join(preset.notes)
        self.note.setText(f"Imported {len(preset.values)} setting{'s' if len(preset.values) != 1 else ''} from the "
                          f"{preset.kind}{f' {preset.name!r}' if preset.name else ''}." + (f" Not taken: {left}"
                                                                                       if left else ""))
        self.refresh()
        return True

    def export_file(self, path: Path) -> None:
        """Write this model's own settings as Hearth's preset file."""
        atomic_write(path, export_preset(self.identity.name, self.model_values()))
        self.note.setText(f"Exported this model's settings to {Path(path).name}.")

    def _import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a model's settings", str(Path.home()), PRESET_FILTER)
        if path:
            self.import_file(Path(path))

    def _export(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export this model's settings",
                                              str(Path.home() / f"{Path(self.identity.name).stem}.hearth.json"),
                                              "Hearth model settings (*.json)")
        if path:
            try:
                self.export_file(Path(path))
            except (OSError, HearthError) as e:
                self.note.setText(f"<span style='color:#d9480f'>Not exported: {e}</span>")

    # -- the result ---------------------------------------------------------------------------

    def values(self) -> dict[str, Any]:
        """Hearth's defaults as edited (the settings' sampling dict)."""
        return dict(self.hearth)

    def model_values(self) -> dict[str, Any]:
        """The loaded model's own settings as edited (empty: none)."""
        return {**self.yours, **self.own.values()}

    def context_policy(self) -> str:
        """The chosen context policy (engine/prompt/view.py's names)."""
        return self.policy.currentData()

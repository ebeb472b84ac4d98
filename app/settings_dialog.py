"""Settings: model, backend, quantization, draft, context, sampling, presets, theme.

The model is the bundled GGUF, a local GGUF file, a local transformers folder
or a Hub id; the backend follows its type (a GGUF may also run on
transformers), and quantization is the GGUF file's own or, on transformers,
Auto/none/int8/int4. A folder the engine would refuse (pickled weights, remote
code) is refused here already, with the engine's reason.

The dialog edits a copy of the settings and only hands it back when it
validates. Before the user confirms it shows the memory plan for the chosen
model, context and draft (engine.sizing, computed off the GUI thread) and
whether it fits; a quick estimate is shown at once while the plan is made.
"""
from __future__ import annotations

import copy
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QButtonGroup, QCheckBox, QComboBox, QDialog, QDialogButtonBox,
                               QDoubleSpinBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QListWidget, QMessageBox, QPlainTextEdit, QPushButton,
                               QRadioButton, QSpinBox, QTabWidget, QVBoxLayout, QWidget)

from engine import HearthError
from engine.models.catalogue import BUNDLED_NAME, bundled_model_path, is_hub_id, parse_hub_id

from .memory import estimate
from .model_choice import QUANTS, check_hf_folder, effective_backend, runs_gguf
from .plan_runner import PlanRunner
from .settings import BUNDLED, DRAFTS, MAX_CONTEXT, THEMES, Settings, SettingsError, _default_sampling
from .text_utils import human_bytes

HUB_PLACEHOLDER = "owner/name, owner/name:Q4_K_M or owner/name/file.gguf"
HUB_TIP = ("A model on the Hugging Face Hub. It is downloaded into the Hugging Face cache when it loads, "
           "with progress in the status bar; Cancel keeps what was fetched and the next try resumes it. "
           "Offline, the cached copy is used.")


class SettingsDialog(QDialog):
    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Hearth settings")
        self.setMinimumWidth(560)
        self._orig = settings
        self._presets = copy.deepcopy(settings.presets)
        self._info_cache: dict[str, object] = {}
        self.result_settings: Settings | None = None
        self.plan = None          # the newest engine.sizing.Plan, once computed
        self._plan_request = 0
        self._planner = PlanRunner(self)
        self._planner.ready.connect(self._plan_ready)
        self._planner.failed.connect(self._plan_failed)
        self._plan_timer = QTimer(self)
        self._plan_timer.setSingleShot(True)
        self._plan_timer.setInterval(250)  # plan once the user stops changing things
        self._plan_timer.timeout.connect(self._request_plan)

        lay = QVBoxLayout(self)
        tabs = QTabWidget()
        tabs.addTab(self._model_tab(settings), "Model")
        tabs.addTab(self._sampling_tab(settings), "Sampling")
        tabs.addTab(self._presets_tab(settings), "System prompts")
        tabs.addTab(self._look_tab(settings), "Appearance")
        lay.addWidget(tabs)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d9480f;")
        self.error.hide()
        lay.addWidget(self.error)
        box = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        box.accepted.connect(self.accept)
        box.rejected.connect(self.reject)
        lay.addWidget(box)
        self.refresh_model()

    # -- model --------------------------------------------------------------

    def _model_tab(self, s: Settings) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        self.rb_bundled = QRadioButton(f"Bundled: {BUNDLED_NAME}")
        self.rb_file = QRadioButton("Local GGUF file:")
        self.rb_hf = QRadioButton("Hugging Face folder:")
        self.rb_hub = QRadioButton("Hugging Face Hub id:")
        self.rb_hf.setToolTip("A local transformers model folder (config.json and *.safetensors weights); "
                              "it runs on the transformers backend")
        self.rb_hub.setToolTip(HUB_TIP)
        self._group = QButtonGroup(self)
        self._radios = {"bundled": self.rb_bundled, "gguf": self.rb_file, "hf_dir": self.rb_hf,
                        "hub": self.rb_hub}
        for rb in self._radios.values():
            self._group.addButton(rb)
        self.path_edit = QLineEdit(s.model if s.source == "gguf" else "")
        self.path_edit.setPlaceholderText("/path/to/model.gguf")
        self.browse = QPushButton("Browse…")
        self.browse.clicked.connect(self._browse)
        self.folder_edit = QLineEdit(s.model if s.source == "hf_dir" else "")
        self.folder_edit.setPlaceholderText("/path/to/model-folder")
        self.browse_folder = QPushButton("Browse…")
        self.browse_folder.clicked.connect(self._browse_dir)
        self.hub_edit = QLineEdit(s.model if s.source == "hub" else "")
        self.hub_edit.setPlaceholderText(HUB_PLACEHOLDER)
        self.hub_edit.setToolTip(HUB_TIP)
        self._radios.get(s.source, self.rb_bundled).setChecked(True)
        models = QVBoxLayout()
        models.addWidget(self.rb_bundled)
        for rb, edit, button in ((self.rb_file, self.path_edit, self.browse),
                                 (self.rb_hf, self.folder_edit, self.browse_folder),
                                 (self.rb_hub, self.hub_edit, None)):
            row = QHBoxLayout()
            row.addWidget(rb)
            row.addWidget(edit, 1)
            if button is not None:
                row.addWidget(button)
            models.addLayout(row)
            # Typing a path or an id picks that kind of model.
            edit.textEdited.connect(lambda _t, rb=rb: rb.setChecked(True))
            edit.editingFinished.connect(self.refresh_model)
            rb.toggled.connect(lambda on, edit=edit: edit.setFocus() if on else None)
        form.addRow("Model", models)

        # GGUF files run on llama.cpp unless the user asks for transformers; everything else
        # is a transformers checkpoint. The choice for GGUF is remembered while switching.
        self._gguf_backend = "hf" if s.backend == "hf" and runs_gguf(s.source, s.model) else "llama_cpp"
        backend_row = QHBoxLayout()
        self.backend_combo = QComboBox()
        self.backend_combo.addItem("llama.cpp", "llama_cpp")
        self.backend_combo.addItem("transformers", "hf")
        self.backend_label = QLabel()
        self.backend_label.setWordWrap(True)
        backend_row.addWidget(self.backend_combo)
        backend_row.addWidget(self.backend_label, 1)
        form.addRow("Backend", backend_row)
        quant_row = QHBoxLayout()
        self.quant_combo = QComboBox()
        for q in QUANTS:
            self.quant_combo.addItem(q.title() if q == "auto" else q, q)
        self.quant_combo.setCurrentIndex(QUANTS.index(s.quant))
        self.quant_combo.setToolTip("transformers: none loads 16-bit on a GPU and float32 on the CPU; int8 "
                                    "and int4 are bitsandbytes. Auto uses what the memory plan chooses.")
        self.quant_label = QLabel()
        self.quant_label.setWordWrap(True)
        self.quant_label.setToolTip("A GGUF file's quantization is read from its metadata")
        quant_row.addWidget(self.quant_combo)
        quant_row.addWidget(self.quant_label, 1)
        form.addRow("Quantization", quant_row)
        self.draft = QComboBox()
        self.draft.addItems([d.title() for d in DRAFTS])
        self.draft.setCurrentIndex(DRAFTS.index(s.draft))
        self.draft.setToolTip("Speculative decoding. Auto drafts with a compatible smaller local GGUF "
                              "when there is one, and with n-gram lookup; it switches itself off where "
                              "it does not pay. The output is the same either way.")
        form.addRow("Draft model", self.draft)
        ctx_row = QHBoxLayout()
        self.ctx_auto = QCheckBox("Auto")
        self.ctx_auto.setChecked(s.context is None)
        self.ctx = QSpinBox()
        self.ctx.setRange(256, MAX_CONTEXT)
        self.ctx.setSingleStep(256)
        self.ctx.setValue(s.context or 4096)
        self.ctx.setEnabled(s.context is not None)
        self.ctx_auto.toggled.connect(lambda on: self.ctx.setEnabled(not on))
        ctx_row.addWidget(self.ctx_auto)
        ctx_row.addWidget(self.ctx, 1)
        form.addRow("Context length", ctx_row)
        self.memory = QLabel()
        self.memory.setWordWrap(True)
        self.memory.setTextFormat(Qt.TextFormat.RichText)
        form.addRow("Memory", self.memory)
        self.plan_view = QPlainTextEdit()
        self.plan_view.setReadOnly(True)
        self.plan_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.plan_view.setMinimumHeight(220)
        self.plan_view.setPlaceholderText("The memory plan appears here.")
        form.addRow("Plan", self.plan_view)

        self._group.buttonToggled.connect(lambda _b, on: self.refresh_model() if on else None)
        self.backend_combo.currentIndexChanged.connect(self._backend_changed)
        for sig in (self.ctx_auto.toggled, self.ctx.valueChanged, self.draft.currentIndexChanged,
                    self.quant_combo.currentIndexChanged):
            sig.connect(self.refresh_model)
        return w

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a GGUF model", str(Path.home()),
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            self.path_edit.setText(path)
            self.rb_file.setChecked(True)
            self.refresh_model()

    def _browse_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Choose a Hugging Face model folder",
                                                self.folder_edit.text().strip() or str(Path.home()))
        if path:
            self.folder_edit.setText(path)
            self.rb_hf.setChecked(True)
            self.refresh_model()

    def _backend_changed(self) -> None:
        if self.backend_combo.isEnabled():
            self._gguf_backend = self.backend_combo.currentData()
        self.refresh_model()

    def chosen_source(self) -> str:
        return next(src for src, rb in self._radios.items() if rb.isChecked())

    def chosen_model(self) -> str:
        edits = {"bundled": None, "gguf": self.path_edit, "hf_dir": self.folder_edit, "hub": self.hub_edit}
        edit = edits[self.chosen_source()]
        return BUNDLED if edit is None else edit.text().strip()

    def chosen_backend(self) -> str:
        """What the settings store: "hf" for a GGUF file the user runs on transformers, else Auto."""
        src, model = self.chosen_source(), self.chosen_model()
        return "hf" if runs_gguf(src, model) and self.backend_combo.currentData() == "hf" else "auto"

    def chosen_quant(self) -> str:
        backend = effective_backend(self.chosen_source(), self.chosen_model(), self.chosen_backend())
        return self.quant_combo.currentData() if backend == "hf" else "auto"

    def _info(self, model: str):
        """GGUF metadata for the chosen model (cached); raises HearthError with a clear message."""
        from engine.models.gguf import model_info

        if model not in self._info_cache:
            if not model:
                raise HearthError("choose a .gguf file")
            path = bundled_model_path() if model == BUNDLED else Path(model).expanduser()
            if not path.is_file():
                raise HearthError(f"model file not found: {path}")
            self._info_cache[model] = model_info(path)
        return self._info_cache[model]

    def _check(self, source: str, model: str):
        """What can be known about the choice now, without loading it: a GGUF file's
        metadata (or None); raises HearthError with the reason the engine would give."""
        if source in ("bundled", "gguf"):
            return self._info(model)
        if not model:
            raise HearthError("choose a model folder" if source == "hf_dir" else "type a Hub id")
        if source == "hf_dir":
            check_hf_folder(Path(model).expanduser())
        elif not is_hub_id(model):
            raise HearthError(f"{model!r} is not a Hub id; type {HUB_PLACEHOLDER}")
        return None

    def _sync_backend(self, source: str, model: str) -> str:
        """Make the backend choice follow the model's type; return the backend in use."""
        gguf = runs_gguf(source, model)
        self.backend_combo.blockSignals(True)
        self.backend_combo.setEnabled(gguf)
        want = self._gguf_backend if gguf else "hf"
        self.backend_combo.setCurrentIndex(self.backend_combo.findData(want))
        self.backend_combo.blockSignals(False)
        if not gguf:
            hint = "model folders and Hub repositories run on transformers"
        elif want == "hf":
            hint = "the GGUF weights are dequantized to float32 once and cached (slower than llama.cpp)"
        else:
            hint = "GGUF files run on llama.cpp"
        self.backend_label.setText(hint)
        self.quant_combo.setHidden(want != "hf")
        return want

    def _clear_plan(self) -> None:
        self._estimate = None
        self.plan = None
        self._plan_timer.stop()
        self._plan_request = -1  # ignore any plan still being made for the old choice
        self.plan_view.clear()

    def refresh_model(self) -> None:
        """Update backend, quantization and the memory estimate for the current choices."""
        source, model = self.chosen_source(), self.chosen_model()
        backend = self._sync_backend(source, model)
        self._clear_plan()
        try:
            info = self._check(source, model)
        except HearthError as e:
            self.quant_label.setText("—")
            self.memory.setText(f"<span style='color:#d9480f'>Cannot read this model: {e}</span>")
            return
        if info is None:
            if source == "hub" and runs_gguf(source, model):
                self.quant_label.setText(f"the one GGUF file the id picks ({parse_hub_id(model)[2] or 'by name'})")
            else:
                self.quant_label.setText("")
            where = ("Downloaded into the Hugging Face cache when it loads (progress in the status bar; "
                     "Cancel keeps what was fetched). " if source == "hub" else "")
            self.memory.setText(f"{where}<i>Making the memory plan…</i>")
            self._plan_timer.start()
            return
        if backend == "hf":
            self.quant_label.setText(f"the file holds {info.file_type}; transformers dequantizes it")
            self.memory.setText("On transformers the weights are dequantized to float32 (several times the "
                                "file's size); the memory plan covers llama.cpp only, so none is shown.")
            return
        self.quant_label.setText(f"{info.file_type} (from the file's metadata)")
        est = estimate(info, None if self.ctx_auto.isChecked() else self.ctx.value())
        self._estimate = est
        verdict = ("<b>fits</b>" if est.fits else
                   "<b style='color:#d9480f'>may not fit</b> — choose a smaller context or model")
        self.memory.setText(
            f"Quick estimate for {est.n_ctx:,} tokens of context: weights {human_bytes(est.weights)} + "
            f"KV cache {human_bytes(est.kv)} + compute ≈{human_bytes(est.compute)} = "
            f"<b>{human_bytes(est.total)}</b>.<br>System RAM available now: "
            f"{human_bytes(est.available)} — {verdict}.<br><i>Making the full memory plan…</i>")
        self._plan_timer.start()

    def _request_plan(self) -> None:
        model = self.chosen_model()
        # Plan the context the engine will really use: its Auto is not the planner's Auto.
        est = self._estimate
        n_ctx = est.n_ctx if est is not None else (None if self.ctx_auto.isChecked() else self.ctx.value())
        quant = self.chosen_quant()
        self._plan_request = self._planner.request(
            None if model == BUNDLED else model, n_ctx,
            "none" if DRAFTS[self.draft.currentIndex()] == "none" else None,
            None if quant == "auto" else quant)

    def _plan_ready(self, n: int, plan) -> None:
        if n != self._plan_request:
            return  # an answer for choices the user has since changed
        self.plan = plan
        ram = plan.breakdown.ram
        colour = "" if plan.fits else " style='color:#d9480f'"
        self.memory.setText(f"<b{colour}>{plan.status}</b>: {human_bytes(ram.total)} of the "
                            f"{human_bytes(ram.available)} of RAM available now.<br>"
                            f"<i>{plan.summary()}. The status bar shows what the loaded model "
                            "really uses.</i>")
        self.plan_view.setPlainText(plan.table())

    def _plan_failed(self, n: int, message: str) -> None:
        if n != self._plan_request:
            return
        self.plan_view.setPlainText(f"No memory plan: {message}")
        if self._estimate is None:  # nothing else to go on: say so where the verdict would be
            later = " It can be made once the model is downloaded." if self.chosen_source() == "hub" else ""
            self.memory.setText(f"No memory plan for this model ({message}).{later}")

    # -- sampling -----------------------------------------------------------

    def _dspin(self, lo: float, hi: float, step: float, value: float, decimals: int = 2) -> QDoubleSpinBox:
        sp = QDoubleSpinBox()
        sp.setRange(lo, hi)
        sp.setSingleStep(step)
        sp.setDecimals(decimals)
        sp.setValue(value)
        return sp

    def _ispin(self, lo: int, hi: int, value: int) -> QSpinBox:
        sp = QSpinBox()
        sp.setRange(lo, hi)
        sp.setValue(value)
        return sp

    def _sampling_tab(self, s: Settings) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        v = {**_default_sampling(), **s.sampling}
        self.sp = {
            "temperature": self._dspin(0.0, 5.0, 0.05, v["temperature"]),
            "top_p": self._dspin(0.01, 1.0, 0.01, v["top_p"]),
            "top_k": self._ispin(0, 100000, v["top_k"]),
            "min_p": self._dspin(0.0, 0.99, 0.01, v["min_p"]),
            "repeat_penalty": self._dspin(0.05, 5.0, 0.05, v["repeat_penalty"]),
            "presence_penalty": self._dspin(-2.0, 2.0, 0.1, v["presence_penalty"]),
            "frequency_penalty": self._dspin(-2.0, 2.0, 0.1, v["frequency_penalty"]),
            "penalty_last_n": self._ispin(-1, 1 << 20, v["penalty_last_n"]),
            "max_tokens": self._ispin(1, 1 << 20, v["max_tokens"]),
        }
        tips = {"temperature": "0 = always the most likely token (greedy)", "top_k": "0 disables",
                "top_p": "1.0 disables", "min_p": "0 disables", "repeat_penalty": "1.0 disables",
                "penalty_last_n": "how many recent tokens the penalties look at; -1 = all",
                "max_tokens": "the longest reply, in tokens"}
        labels = {"top_p": "Top-p", "top_k": "Top-k", "min_p": "Min-p", "max_tokens": "Max tokens"}
        for k, widget in self.sp.items():
            widget.setToolTip(tips.get(k, ""))
            form.addRow(labels.get(k, k.replace("_", " ").capitalize()), widget)
        seed_row = QHBoxLayout()
        self.seed_random = QCheckBox("Random")
        self.seed_random.setChecked(v["seed"] is None)
        self.seed = self._ispin(0, 2**31 - 1, v["seed"] or 0)
        self.seed.setEnabled(v["seed"] is not None)
        self.seed_random.toggled.connect(lambda on: self.seed.setEnabled(not on))
        seed_row.addWidget(self.seed_random)
        seed_row.addWidget(self.seed, 1)
        form.addRow("Seed", seed_row)
        reset = QPushButton("Reset to defaults")
        reset.clicked.connect(self._reset_sampling)
        form.addRow("", reset)
        return w

    def _reset_sampling(self) -> None:
        d = _default_sampling()
        for k, widget in self.sp.items():
            widget.setValue(d[k])
        self.seed_random.setChecked(d["seed"] is None)

    # -- presets ------------------------------------------------------------

    def _presets_tab(self, s: Settings) -> QWidget:
        w = QWidget()
        lay = QHBoxLayout(w)
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
        self._fill_presets(s.default_preset)
        return w

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
        if getattr(self, "_showing", False) or not 0 <= row < len(self._presets):
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

    # -- appearance ---------------------------------------------------------

    def _look_tab(self, s: Settings) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        self.theme = QComboBox()
        self.theme.addItems([t.title() for t in THEMES])
        self.theme.setCurrentIndex(THEMES.index(s.theme))
        self.theme.setToolTip("System follows your desktop's light or dark setting where Qt can tell")
        form.addRow("Theme", self.theme)
        return w

    # -- result -------------------------------------------------------------

    def build(self) -> Settings:
        """The settings as edited; raises SettingsError with a message for the user."""
        sampling = {k: (w.value() if isinstance(w, QSpinBox) else round(w.value(), 4))
                    for k, w in self.sp.items()}
        sampling["seed"] = None if self.seed_random.isChecked() else self.seed.value()
        s = Settings(model=self.chosen_model(), source=self.chosen_source(), backend=self.chosen_backend(),
                     quant=self.chosen_quant(),
                     context=None if self.ctx_auto.isChecked() else self.ctx.value(),
                     draft=DRAFTS[self.draft.currentIndex()], n_threads=self._orig.n_threads,
                     sampling=sampling, presets=copy.deepcopy(self._presets),
                     default_preset=self.default_preset.currentText(),
                     theme=THEMES[self.theme.currentIndex()])
        s.validate()
        try:
            self._check(s.source, s.model)
        except HearthError as e:
            raise SettingsError(f"model: {e}") from None
        return s

    def accept(self) -> None:  # noqa: D401 (Qt override)
        try:
            s = self.build()
        except SettingsError as e:
            self.error.setText(str(e))
            self.error.show()
            return
        est = getattr(self, "_estimate", None)
        too_big = (not self.plan.fits) if self.plan is not None else (est is not None and not est.fits)
        if too_big and s.load_key() != self._orig.load_key():
            need = self.plan.breakdown.ram.total if self.plan is not None else est.total
            have = self.plan.breakdown.ram.available if self.plan is not None else est.available
            answer = QMessageBox.warning(
                self, "Model may not fit",
                f"The memory plan needs {human_bytes(need)}, more than the RAM available now "
                f"({human_bytes(have)}). Load it anyway?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
            if answer != QMessageBox.StandardButton.Yes:
                return
        self.result_settings = s
        super().accept()

"""The settings dialog's Model tab: which model, backend, quantization, draft, context, GPU layers
and KV cache type, and whether it fits (a quick estimate at once, then engine.sizing's plan, made
off the GUI thread the way the load will make it). Under Auto the boxes show what the plan picked,
which is what the model will run with; a plan that does not fit says why before anything loads.
The disk prompt cache's size and its "Clear cache" button are here too.

A mixin of SettingsDialog (it reads and sets the dialog's plan state); it lives in
its own file so the model choice can be read on its own.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QButtonGroup, QCheckBox, QComboBox, QFileDialog, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QPlainTextEdit, QPushButton, QRadioButton, QSpinBox,
                               QVBoxLayout, QWidget)

from engine import HearthError, default_exactness
from engine.library import BUNDLED_NAME, parse_hub_id
from engine.loading import (HUB_PLACEHOLDER, KV_TYPES, QUANTS, LoadRequest, ModelCheck, effective_backend,
                            quick_estimate, runs_gguf)

from app.bridge.plan_runner import PlanRunner
from app.settings_ui.cache_row import CacheRow
from app.settings_ui.draft_list import DraftList
from app.settings_ui.projector_box import ProjectorBox
from app.core.exactness import exactness_note, measured_difference
from app.core.plan_text import headline
from app.core.settings import BUNDLED, EXACTNESS, MAX_CONTEXT, Settings
from app.core.text_utils import human_bytes

HUB_TIP = ("A model on the Hugging Face Hub. It is downloaded into the Hugging Face cache when it loads, "
           "with progress in the status bar; Cancel keeps what was fetched and the next try resumes it. "
           "Offline, the cached copy is used.")
PLAN_DELAY_MS = 250  # plan once the user stops changing things
GPU_TIP = ("Transformer blocks on the GPU. Auto: as many as the memory plan fits; All: every block and the "
           "output head; a number: that many (llama.cpp offloads the last ones). Without a GPU that llama.cpp "
           "can use, everything runs on the CPU.")
KV_TIP = ("Precision of the KV cache. f16 is exact; q8_0 halves the cache for a tiny change in the numbers; "
          "q4_0 quarters it at a visible cost in quality. On the CPU a quantized cache needs flash attention, "
          "which gives up bit-identical batched logits. Auto keeps f16 unless memory is short.")


class ModelTabMixin:
    def _init_model_state(self) -> None:
        """The plan state the tab and the dialog's accept() share; call before _model_tab()."""
        self._model_check = ModelCheck()
        self._estimate = None     # engine.loading.estimate's quick quick_estimate, for a GGUF on llama.cpp
        self.plan = None          # the newest engine.sizing.Plan, once computed
        self._plan_request = 0
        self._planner = PlanRunner(self)
        self._planner.ready.connect(self._plan_ready)
        self._planner.failed.connect(self._plan_failed)
        self._plan_timer = QTimer(self)
        self._plan_timer.setSingleShot(True)
        self._plan_timer.setInterval(PLAN_DELAY_MS)
        self._plan_timer.timeout.connect(self._request_plan)

    def _model_tab(self, s: Settings) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        self.rb_bundled = QRadioButton(f"Bundled: {BUNDLED_NAME}")
        self.rb_file = QRadioButton("Local GGUF file:")
        self.rb_hf = QRadioButton("Hugging Face folder:")
        self.rb_hub = QRadioButton("Hugging Face Hub id:")
        self.rb_remote = QRadioButton("On a server:")
        self.rb_remote.setToolTip("A model another machine serves (add servers in the Models dock; their models "
                                  "are listed in the library): URL#model")
        self.rb_hf.setToolTip("A local transformers model folder (config.json and *.safetensors weights); "
                              "it runs on the transformers backend")
        self.rb_hub.setToolTip(HUB_TIP)
        self._group = QButtonGroup(self)
        self._radios = {"bundled": self.rb_bundled, "gguf": self.rb_file, "hf_dir": self.rb_hf,
                        "hub": self.rb_hub, "remote": self.rb_remote}
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
        self.remote_edit = QLineEdit(s.model if s.source == "remote" else "")
        self.remote_edit.setPlaceholderText("https://host:8765/v1#model-id")
        self._radios.get(s.source, self.rb_bundled).setChecked(True)
        models = QVBoxLayout()
        models.addWidget(self.rb_bundled)
        for rb, edit, button in ((self.rb_file, self.path_edit, self.browse),
                                 (self.rb_hf, self.folder_edit, self.browse_folder),
                                 (self.rb_hub, self.hub_edit, None), (self.rb_remote, self.remote_edit, None)):
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
        self.draft_list = DraftList(self.draft, self, self.refresh_model)
        self.fill_drafts(s.model, s.draft)
        self.draft.setToolTip("Speculative decoding. Auto drafts with a compatible smaller local GGUF "
                              "when there is one, and with n-gram lookup; it switches itself off where "
                              "it does not pay. The output is the same either way.")
        form.addRow("Draft model", self.draft)
        self.projector = ProjectorBox(s.mmproj)
        form.addRow("Vision projector", self.projector)
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
        gpu_row = QHBoxLayout()
        self.gpu_mode = QComboBox()
        for label, data in (("Auto", "auto"), ("All", "all"), ("Number", "number")):
            self.gpu_mode.addItem(label, data)
        gl = s.gpu_layers
        self.gpu_mode.setCurrentIndex(self.gpu_mode.findData("auto" if gl is None else "all" if gl == "all"
                                                             else "number"))
        self.gpu_mode.setToolTip(GPU_TIP)
        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(0, 999)
        self.gpu_layers.setValue(gl if isinstance(gl, int) else 0)
        self.gpu_layers.setEnabled(isinstance(gl, int))
        self.gpu_layers.setToolTip(GPU_TIP)
        self.gpu_mode.currentIndexChanged.connect(
            lambda _i: self.gpu_layers.setEnabled(self.gpu_mode.currentData() == "number"))
        gpu_row.addWidget(self.gpu_mode)
        gpu_row.addWidget(self.gpu_layers, 1)
        form.addRow("GPU layers", gpu_row)
        self.kv_combo = QComboBox()
        for k in KV_TYPES:
            self.kv_combo.addItem("Auto" if k == "auto" else k, k)
        self.kv_combo.setCurrentIndex(KV_TYPES.index(s.kv_type))
        self.kv_combo.setToolTip(KV_TIP)
        form.addRow("KV cache type", self.kv_combo)
        exact_row = QHBoxLayout()
        self.exactness = QComboBox()
        self.exactness.addItem("Exact", "exact")
        self.exactness.addItem("Fast", "fast")
        self.exactness.setCurrentIndex(EXACTNESS.index(s.exactness))
        self.exactness_note = QLabel()
        self.exactness_note.setWordWrap(True)
        exact_row.addWidget(self.exactness)
        exact_row.addWidget(self.exactness_note, 1)
        form.addRow("Exactness", exact_row)
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
        cache = CacheRow()
        self.cache_label, self.clear_cache_button = cache.label, cache.button
        form.addRow("Prompt cache", cache)

        self._group.buttonToggled.connect(lambda _b, on: self.refresh_model() if on else None)
        self.backend_combo.currentIndexChanged.connect(self._backend_changed)
        for sig in (self.ctx_auto.toggled, self.ctx.valueChanged, self.draft.currentIndexChanged,
                    self.quant_combo.currentIndexChanged, self.gpu_mode.currentIndexChanged,
                    self.gpu_layers.valueChanged, self.kv_combo.currentIndexChanged,
                    self.exactness.currentIndexChanged):
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
        edits = {"bundled": None, "gguf": self.path_edit, "hf_dir": self.folder_edit, "hub": self.hub_edit,
                 "remote": self.remote_edit}
        edit = edits[self.chosen_source()]
        return BUNDLED if edit is None else edit.text().strip()

    def chosen_backend(self) -> str:
        """What the settings store: "hf" for a GGUF file the user runs on transformers, else Auto."""
        src, model = self.chosen_source(), self.chosen_model()
        return "hf" if runs_gguf(src, model) and self.backend_combo.currentData() == "hf" else "auto"

    def chosen_quant(self) -> str:
        backend = effective_backend(self.chosen_source(), self.chosen_model(), self.chosen_backend())
        return self.quant_combo.currentData() if backend == "hf" else "auto"

    def chosen_gpu_layers(self) -> int | str | None:
        """None (Auto), "all" or a number of blocks."""
        mode = self.gpu_mode.currentData()
        return None if mode == "auto" else "all" if mode == "all" else self.gpu_layers.value()

    def chosen_kv_type(self) -> str:
        backend = effective_backend(self.chosen_source(), self.chosen_model(), self.chosen_backend())
        return self.kv_combo.currentData() if backend == "llama_cpp" else "auto"

    def chosen_exactness(self) -> str:
        return self.exactness.currentData() if self.exactness.isEnabled() else default_exactness()

    def chosen_request(self) -> LoadRequest:
        """The load the dialog's choices stand for (what the plan and the load both see)."""
        return LoadRequest(model=self.chosen_model(), source=self.chosen_source(), backend=self.chosen_backend(),
                           quant=self.chosen_quant(), context=None if self.ctx_auto.isChecked() else self.ctx.value(),
                           draft=self.chosen_draft(), gpu_layers=self.chosen_gpu_layers(),
                           kv_type=self.chosen_kv_type(), exactness=self.chosen_exactness(),
                           workers=self.chosen_workers())

    def chosen_workers(self) -> tuple[str, ...]:
        """The machines ticked in the Machines tab (none while the dialog is still being built)."""
        tab = getattr(self, "machines_tab", None)
        return tab.values()["workers"] if tab is not None else ()

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
        self.kv_combo.setEnabled(want == "llama_cpp")  # transformers keeps the cache in its compute dtype
        self.exactness.setEnabled(want == "llama_cpp")  # the switches are llama.cpp's
        self.exactness_note.setText(exactness_note(self.chosen_exactness(), want == "llama_cpp",
                                                   measured_difference(source, model) if want == "llama_cpp" else ""))
        return want

    def _clear_plan(self) -> None:
        self._estimate = None
        self.plan = None
        self._plan_timer.stop()
        self._plan_request = -1  # ignore any plan still being made for the old choice
        self.plan_view.clear()
        self.kv_combo.setItemText(0, "Auto")

    def chosen_draft(self) -> str:
        """"auto", "none" or the path of the draft GGUF picked by name."""
        return self.draft_list.chosen()

    def fill_drafts(self, model: str, current: str) -> None:
        """Auto, None, and by name the draft models on disk that suit ``model``, listed off the GUI
        thread (app/settings_ui/draft_list.py); ``current`` stays chosen until they arrive."""
        self._drafts_for = model
        self.draft_list.fill(model, current)

    def refresh_model(self) -> None:
        """Update backend, quantization and the memory estimate for the current choices."""
        source, model = self.chosen_source(), self.chosen_model()
        if model != self._drafts_for:
            self.fill_drafts(model, self.chosen_draft())
        backend = self._sync_backend(source, model)
        self._clear_plan()
        if source == "remote":
            for w in (self.quant_combo, self.kv_combo, self.exactness, self.backend_combo):
                w.setEnabled(False)
            self.backend_label.setText("runs on its server")
            self.memory.setText("Runs on its server: no memory of this machine holds it, and the server decides "
                                "its context and kernels.")
            return
        try:
            info = self._model_check.check(source, model)
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
        est = quick_estimate(info, None if self.ctx_auto.isChecked() else self.ctx.value())
        self._estimate = est
        self._show_auto(self.ctx, self.ctx_auto.isChecked(), est.n_ctx)
        verdict = ("<b>fits</b>" if est.fits else
                   "<b style='color:#d9480f'>may not fit</b> — choose a smaller context or model")
        self.memory.setText(
            f"Quick estimate for {est.n_ctx:,} tokens of context: weights {human_bytes(est.weights)} + "
            f"KV cache {human_bytes(est.kv)} + compute ≈{human_bytes(est.compute)} = "
            f"<b>{human_bytes(est.total)}</b>.<br>System RAM available now: "
            f"{human_bytes(est.available)} — {verdict}.<br><i>Making the full memory plan…</i>")
        self._plan_timer.start()

    def _request_plan(self) -> None:
        self._plan_request = self._planner.request(self.chosen_request())

    @staticmethod
    def _show_auto(box: QSpinBox, auto: bool, value: int) -> None:
        """Under Auto a (disabled) box shows the value the load will use."""
        if auto:
            box.blockSignals(True)  # showing a value is not the user changing it
            box.setValue(value)
            box.blockSignals(False)

    def _plan_ready(self, n: int, plan) -> None:
        if n != self._plan_request:
            return  # an answer for choices the user has since changed
        self.plan = plan
        self.memory.setText(headline(plan))
        self._show_auto(self.ctx, self.ctx_auto.isChecked(), plan.n_ctx)
        self._show_auto(self.gpu_layers, self.gpu_mode.currentData() == "auto", plan.n_gpu_layers)
        if self.kv_combo.isEnabled():
            self.kv_combo.setItemText(0, f"Auto ({plan.kv_type})")
        from engine.sizing import render_table

        self.plan_view.setPlainText(render_table(plan))

    def _plan_failed(self, n: int, message: str) -> None:
        if n != self._plan_request:
            return
        self.plan_view.setPlainText(f"No memory plan: {message}")
        if self._estimate is None:  # nothing else to go on: say so where the verdict would be
            later = " It can be made once the model is downloaded." if self.chosen_source() == "hub" else ""
            self.memory.setText(f"No memory plan for this model ({message}).{later}")

"""Settings: model, backend, quantization, draft, context, sampling, presets, theme, local server, tools, machines,
voice.

The model is the bundled GGUF, a local GGUF file, a local transformers folder
or a Hub id; the backend follows its type (a GGUF may also run on
transformers), and quantization is the GGUF file's own or, on transformers,
Auto/none/int8/int4. A folder the engine would refuse (pickled weights, remote
code) is refused here already, with the engine's reason.

The dialog edits a copy of the settings and only hands it back when it
validates. Before the user confirms it shows the memory plan for the chosen
model, context, GPU layers, KV cache type and draft (engine.sizing, computed
off the GUI thread the way the load will) and whether it fits; a quick
estimate is shown at once while the plan is made. A set-up that does not fit
is refused with the reason and what would fit, unless the user confirms it.
"""
from __future__ import annotations

from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QMessageBox,
                               QTabWidget, QVBoxLayout, QWidget)

from engine import HearthError
from engine.reply_formats import ThinkControl
from engine.loading import AUTO

from app.core import model_defaults
from app.core.model_defaults import NO_MODEL, ModelIdentity
from app.core.paths import data_dir
from app.core.plan_text import refusal
from app.settings_ui.presets_editor import PresetsEditor
from app.settings_ui.screen_fit import fit_screen, scrolled
from app.settings_ui.sampling_form import SamplingForm
from app.core.settings import THEMES, Settings, SettingsError
from app.settings_ui.settings_model_tab import ModelTabMixin
from app.settings_ui.settings_server_tab import ServerTab
from app.settings_ui.settings_machines_tab import MachinesTab
from app.settings_ui.settings_tools_tab import ToolsTab
from app.settings_ui.settings_voice_tab import VoiceTab
from app.core.text_utils import human_bytes


class SettingsDialog(ModelTabMixin, QDialog):
    def __init__(self, settings: Settings, parent: QWidget | None = None, *, identity: ModelIdentity = NO_MODEL,
                 think: ThinkControl | None = None) -> None:
        """``identity``: the loaded model (its own settings are edited in the Sampling tab); ``think``: its
        Think control (None: its template has none)."""
        super().__init__(parent)
        self.setWindowTitle("Hearth settings")
        self.setMinimumWidth(560)
        self._orig = settings
        self._identity = identity
        self.result_settings: Settings | None = None
        self._init_model_state()

        lay = QVBoxLayout(self)
        tabs = QTabWidget()
        self.tabs = tabs
        # Each tab scrolls where it must: the dialog fits a 1366x768 laptop screen (fit_screen).
        tabs.addTab(scrolled(self._model_tab(settings)), "Model")
        self.sampling_form = SamplingForm(settings.sampling, settings.context_policy, identity=identity,
                                          yours=model_defaults.yours(settings, identity), think=think,
                                          servers=[s["name"] for s in settings.mcp_servers])
        tabs.addTab(scrolled(self.sampling_form), "Sampling")
        self.presets_editor = PresetsEditor(settings.presets, settings.default_preset)
        self.preset_list, self.default_preset = self.presets_editor.preset_list, self.presets_editor.default_preset
        tabs.addTab(scrolled(self.presets_editor), "System prompts")
        tabs.addTab(scrolled(self._look_tab(settings)), "Appearance")
        self.server_tab = ServerTab(settings)
        tabs.addTab(scrolled(self.server_tab), "Local server")
        self.tools_tab = ToolsTab(settings)
        tabs.addTab(scrolled(self.tools_tab), "Tools")
        self.machines_tab = MachinesTab(settings, data_dir())
        tabs.addTab(scrolled(self.machines_tab), "Machines")
        self.machines_tab.table.itemChanged.connect(lambda *_: self.refresh_model())  # the plan's split follows
        self.voice_tab = VoiceTab(settings)
        tabs.addTab(scrolled(self.voice_tab), "Voice")
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
        fit_screen(self, [tabs.widget(i).widget() for i in range(tabs.count())])

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
        sampling = self.sampling_form.values()
        s = Settings(model=self.chosen_model(), source=self.chosen_source(), backend=self.chosen_backend(),
                     quant=self.chosen_quant(),
                     context=AUTO if self.ctx_auto.isChecked() else self.ctx.value(),
                     draft=self.chosen_draft(), mmproj=self.projector.value(), n_threads=self._orig.n_threads,
                     threads_poll=self._orig.threads_poll,
                     gpu_layers=self.chosen_gpu_layers(), kv_type=self.chosen_kv_type(),
                     exactness=self.chosen_exactness(), tuning=self._orig.tuning,
                     tuning_by_path=self._orig.tuning_by_path, models=self._orig.models,
                     sampling=sampling, presets=self.presets_editor.presets(),
                     default_preset=self.presets_editor.default_name(),
                     theme=THEMES[self.theme.currentIndex()],
                     context_policy=self.sampling_form.context_policy(), **self.server_tab.values(),
                     **self.tools_tab.values(), **self.machines_tab.values(), **self.voice_tab.values())
        if self._identity.key is not None:  # the loaded model's own settings, as the Sampling tab edited them
            s = model_defaults.with_yours(s, self._identity, self.sampling_form.model_values())
        s.validate()
        try:
            self._model_check.check(s.source, s.model)
        except HearthError as e:
            raise SettingsError(f"model: {e}") from None
        return s

    def confirm_too_big(self, why: str) -> bool:
        """Ask before loading a set-up the plan says does not fit (tests replace this)."""
        answer = QMessageBox.warning(self, "Model does not fit", f"{why}\n\nLoad it anyway?",
                                     QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def accept(self) -> None:  # noqa: D401 (Qt override)
        try:
            s = self.build()
        except SettingsError as e:
            self.error.setText(str(e))
            self.error.show()
            return
        est = self._estimate
        too_big = (not self.plan.fits) if self.plan is not None else (est is not None and not est.fits)
        if too_big and s.load_spec() != self._orig.load_spec():
            if self.plan is not None:
                why = refusal(self.plan)
            else:
                why = (f"The quick estimate needs {human_bytes(est.total)}, more than the RAM available now "
                       f"({human_bytes(est.available)}).")
            if not self.confirm_too_big(why):
                return
        self.result_settings = s
        super().accept()

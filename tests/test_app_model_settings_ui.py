"""Settings → Sampling shows each value's layer and resets it to the layer below; a model's settings imported
from a real Modelfile, exported and read back; Chat → This chat's settings; the dialog on a 1366x768 laptop
screen; and info bars that say one thing once and go when they are no longer true."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.model_defaults import identify, reply_layers, yours
from app.core.settings import Settings
from engine.library.preset_files import read_preset
from engine.sizing.load_spec import LoadSpec
from gguf_copy import QWEN3_SAMPLING, with_metadata

PRESETS = Path(__file__).parent / "fixtures" / "presets"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def model(bundled_path, tmp_path_factory):
    return with_metadata(Path(bundled_path), tmp_path_factory.mktemp("ui") / "qwen3-like.gguf", QWEN3_SAMPLING)


@pytest.fixture
def dialog(qtbot, data_dir, model):
    from app.settings_ui.settings_dialog import SettingsDialog

    ident = identify(LoadSpec(model=str(model)), data_dir)
    s = Settings(model=str(model), source="gguf")
    s.sampling.update(presence_penalty=0.3)
    dlg = SettingsDialog(s, None, identity=ident)
    qtbot.addWidget(dlg)
    return dlg, ident


def test_each_value_shows_its_layer_and_resets_to_the_one_below(dialog):
    dlg, ident = dialog
    form = dlg.sampling_form
    assert form.model_scope and form.for_model.text() == "This model: qwen3-like.gguf"
    assert "general.sampling keys" in form.source.text() and "Mirostat" in form.source.text()
    assert form.layer_of("temperature") == "the model's recommendation" and form.rows["temperature"].edit.value() == 0.6
    assert form.layer_of("presence_penalty") == "yours for every model"
    assert form.layer_of("frequency_penalty") == "Hearth's default"
    assert form.layer_of("max_tokens") == "Hearth's default" and form.rows["max_tokens"].edit.value() is None
    assert not form.rows["temperature"].reset.isEnabled()
    form.rows["temperature"].edit.spin.setValue(0.25)  # the user's own value for this model
    assert form.layer_of("temperature") == "yours for this model"
    assert form.rows["temperature"].reset.toolTip() == "Back to the model's recommendation: 0.6"
    form.rows["max_tokens"].edit.none.setChecked(False)
    form.rows["max_tokens"].edit.spin.setValue(2048)
    built = dlg.build()
    assert yours(built, ident) == {"temperature": 0.25, "max_tokens": 2048}
    p = reply_layers(built, ident).params()
    assert (p.temperature, p.max_tokens, p.top_k, p.presence_penalty) == (0.25, 2048, 20, 0.3)
    form.rows["temperature"].reset.click()
    assert form.layer_of("temperature") == "the model's recommendation"
    assert yours(dlg.build(), ident) == {"max_tokens": 2048}


def test_every_model_scope_edits_hearth_s_defaults(dialog):
    dlg, ident = dialog
    form = dlg.sampling_form
    form.for_all.setChecked(True)
    assert form.layer_of("temperature") == "Hearth's default" and form.rows["temperature"].edit.value() == 0.7
    assert form.own.isHidden() and not form.import_button.isEnabled()
    form.rows["top_k"].edit.spin.setValue(33)
    assert form.layer_of("top_k") == "yours for every model"
    built = dlg.build()
    assert built.sampling["top_k"] == 33 and yours(built, ident) == {}
    assert reply_layers(built, ident).values["top_k"] == 20  # the model's recommendation still wins for it
    form.rows["presence_penalty"].reset.click()
    assert dlg.build().sampling["presence_penalty"] == 0.0


def test_import_a_real_modelfile_export_and_read_it_back(dialog, tmp_path):
    dlg, ident = dialog
    form = dlg.sampling_form
    assert form.import_file(PRESETS / "mario.Modelfile")
    assert form.note.text() == "Imported 3 settings from the Ollama Modelfile 'llama3.2'."
    assert form.layer_of("temperature") == "yours for this model" and form.rows["temperature"].edit.value() == 1.0
    assert form.own.system.toPlainText().startswith("You are Mario") and form.own.ctx.value() == 4096
    mine = yours(dlg.build(), ident)
    assert mine == {"temperature": 1.0, "context": 4096,
                    "system_prompt": "You are Mario from super mario bros, acting as an assistant."}
    out = tmp_path / "mario.hearth.json"
    form.export_file(out)
    assert read_preset(out.read_bytes()).values == mine


@pytest.mark.parametrize("name, data, says", [
    ("hostile.Modelfile", b"FROM x\nPARAMETER warmth 9\n", "hostile.Modelfile: line 2: unknown parameter 'warmth'"),
    ("big.Modelfile", b"FROM x\n#" + b"x" * (10 << 20),
     "big.Modelfile: the file is 10,485,768 bytes; a preset is at most 1,048,576 bytes"),
    ("binary.json", b"\x00\x01\x02\x03", "binary.json: line 1: this is not a text file"),
    ("template.Modelfile", (PRESETS / "llama3.2-show.Modelfile").read_bytes(),
     "template.Modelfile: line 5: Hearth renders the model's own chat template"),
])
def test_a_malformed_or_hostile_import_is_one_line_and_changes_nothing(dialog, tmp_path, name, data, says):
    dlg, ident = dialog
    form = dlg.sampling_form
    form.rows["top_p"].edit.spin.setValue(0.5)
    before = form.model_values()
    (tmp_path / name).write_bytes(data)
    assert not form.import_file(tmp_path / name)
    assert says in form.note.text() and "Nothing was changed." in form.note.text() and "\n" not in form.note.text()
    assert form.model_values() == before == {"top_p": 0.5}


def test_this_chat_s_settings_over_its_model_s(qtbot, data_dir, model):
    from app.settings_ui.chat_settings_dialog import ChatSettingsDialog

    ident = identify(LoadSpec(model=str(model)), data_dir)
    s = Settings()
    dlg = ChatSettingsDialog("Bread", {"max_tokens": 300}, lambda chat: reply_layers(s, ident, chat))
    qtbot.addWidget(dlg)
    assert dlg.layer_of("max_tokens") == "this chat's" and dlg.rows["max_tokens"].edit.value() == 300
    assert dlg.layer_of("top_k") == "the model's recommendation"
    assert dlg.rows["max_tokens"].reset.toolTip() == "Back to Hearth's default: none"
    dlg.rows["temperature"].edit.spin.setValue(0.1)
    dlg.rows["max_tokens"].reset.click()
    assert dlg.chat == {"temperature": 0.1} and dlg.layer_of("max_tokens") == "Hearth's default"


LAPTOP = {"screens": [{"name": "laptop", "x": 0, "y": 0, "width": 1366, "height": 768, "logicalDpi": 96,
                       "logicalBaseDpi": 96, "dpr": 1}]}
CHECK = """
import json, sys
from PySide6.QtWidgets import QApplication
app = QApplication(sys.argv)
from app.core.settings import Settings
from app.settings_ui.settings_dialog import SettingsDialog
dlg = SettingsDialog(Settings())
dlg.show()
for _ in range(30):
    app.processEvents()
room = app.primaryScreen().availableGeometry()
page = dlg.tabs.widget(0).widget()
def rect(w):
    top = w.mapTo(page, w.rect().topLeft())
    return [top.y(), top.y() + w.height()]
ok = dlg.findChild(type(dlg.tabs.parent())) or dlg
print(json.dumps({"room": [room.width(), room.height()], "frame": [dlg.frameGeometry().width(),
                  dlg.frameGeometry().height()], "plan": rect(dlg.plan_view),
                  "cache": rect(dlg.cache_label.parentWidget()), "scrolls": [dlg.tabs.widget(i).verticalScrollBar()
                  .maximum() > 0 for i in range(dlg.tabs.count())]}))
"""


def test_settings_fit_a_1366x768_laptop_screen_and_nothing_overlaps(tmp_path):
    config = tmp_path / "laptop.json"
    config.write_text(json.dumps(LAPTOP))
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}", "HEARTH_DATA_DIR": str(tmp_path),
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["room"] == [1366, 768]
    assert got["frame"][0] <= 1366 and got["frame"][1] <= 768  # the dialog, its buttons included, is on screen
    assert got["cache"][0] >= got["plan"][1]  # the Prompt cache row is below the plan box, not over it
    assert got["scrolls"][0]  # the Model tab is taller than the room: it scrolls instead of squeezing


def test_one_event_one_bar_and_a_bar_goes_when_it_is_no_longer_true(qtbot):
    from app.ui.info_bar import InfoArea

    info = InfoArea()
    qtbot.addWidget(info)
    info.show_message("layers on other machines: a:1", "info", tags=("model",))
    info.show_message("a:1 stopped answering", "error", tags=("model", "reply:7"))
    assert info.shown("reply:7") and not info.shown("reply:8")
    info.dismiss("model")
    assert info.messages() == [] and not info.shown("reply:7")

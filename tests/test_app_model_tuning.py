""""Apply best" in the real window: the benchmark dialog makes a row's load settings model A's own, so A loads with
them (and a renamed copy of A), model B loads without them, Settings shows them for A, Roll back takes them
away; a settings file that kept them by A's path moves them to A when A loads."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.core.model_defaults import with_yours, yours
from app.core.settings import Settings, SettingsFile
from app.window.main_window import MainWindow
from gguf_copy import same_renamed_and_other

ROW = {"draft": "none", "kv_type": "q8_0", "n_threads": 1, "exactness": "fast"}


@pytest.fixture(scope="module")
def models(bundled_path, tmp_path_factory):
    return same_renamed_and_other(bundled_path, tmp_path_factory.mktemp("win-tuned"))


def switch(qtbot, w: MainWindow, model: Path) -> None:
    w.apply_settings(replace(w.settings, model=str(model), source="gguf"))
    wait_loaded(qtbot, w, model)


def wait_loaded(qtbot, w: MainWindow, model: Path) -> None:
    qtbot.waitUntil(lambda: w.host.ready and w.host.model.path == str(model) and w.host.identity.key is not None,
                    timeout=60_000)


def load_of(w: MainWindow) -> tuple:
    m = w.host.model
    return m.local.kv_type, m.local.exactness, m.local.n_threads, m.local.draft


def test_apply_best_follows_model_a_and_not_model_b(qtbot, make_window, models):
    from app.performance.tune_dialog import TuneDialog
    from app.settings_ui.settings_dialog import SettingsDialog

    a, renamed, b = models
    w = make_window()
    plain = load_of(w)  # the bundled model with the settings for every model
    assert plain[0] != "q8_0" and plain[1] != "fast"
    switch(qtbot, w, a)
    assert load_of(w) == plain
    ia = w.host.identity  # (while a model loads, the host knows none)
    dlg = TuneDialog(str(a), "a", lambda: w.settings, w.apply_settings, w, identity=ia)
    qtbot.addWidget(dlg)
    # a finished run's result, as run_tune gives it (its own tests measure it): only the best row matters here
    dlg.result = {"best": "KV q8_0", "rows": [{"name": "KV q8_0", "status": "measured", "settings": dict(ROW)}]}
    assert not dlg.rollback_button.isEnabled()
    before = w.settings
    dlg.apply_best()
    assert "model's own load settings" in dlg.status.text() and dlg.rollback_button.isEnabled()
    assert w.settings.load_spec() == before.load_spec()  # the settings for every model are untouched
    assert yours(w.settings, ia) == ROW
    wait_loaded(qtbot, w, a)  # A reloads with its own
    assert load_of(w) == ("q8_0", "fast", 1, "none")
    # Settings → Sampling, this model: the load settings show as yours for this model, and OK keeps them
    sd = SettingsDialog(w.settings, w, identity=w.host.identity, think=w.host.think)
    qtbot.addWidget(sd)
    assert sd.sampling_form.own.load_layer() == "yours for this model" and "KV cache q8_0" in \
        sd.sampling_form.own.load.text()
    assert yours(sd.build(), w.host.identity) == ROW
    switch(qtbot, w, b)
    assert load_of(w) == plain  # B loads without A's tuned values
    sd = SettingsDialog(w.settings, w, identity=w.host.identity, think=w.host.think)
    qtbot.addWidget(sd)
    assert sd.sampling_form.own.load_layer() == "as in Settings → Model"
    switch(qtbot, w, a)
    assert load_of(w) == ("q8_0", "fast", 1, "none")  # and back to A with them
    switch(qtbot, w, renamed)
    assert load_of(w) == ("q8_0", "fast", 1, "none")  # a renamed copy elsewhere is the same model
    saved, notice = SettingsFile().load()  # a restart
    assert notice is None and yours(saved, w.host.identity) == ROW and saved.tuning == w.settings.tuning
    dlg.roll_back()
    assert yours(w.settings, ia) == {} and w.settings.tuning == {}
    assert not dlg.rollback_button.isEnabled()
    wait_loaded(qtbot, w, renamed)
    assert load_of(w) == plain
    dlg.close()


def test_a_tuning_kept_by_the_path_moves_to_the_model_when_it_loads(qtbot, make_window, models, data_dir):
    """A version 3 file: "Apply best" on A set the settings for every model and kept its record by A's path.
    A is not hashed yet, so the record waits until A loads; then it is A's own and the others get back theirs."""
    a, _renamed, b = models
    raw = Settings(model=str(a), source="gguf", kv_type="q8_0", exactness="fast").to_dict()
    del raw["models"], raw["tuning_by_path"]
    raw.update(version=3, tuning={str(a): {"applied": {"kv_type": "q8_0", "exactness": "fast"},
                                           "previous": {"kv_type": "auto", "exactness": "exact"}}})
    SettingsFile().path.write_text(json.dumps(raw))
    assert SettingsFile().load()[0].tuning_by_path == raw["tuning"]  # A is not known by its hash yet
    w = make_window(write=False)
    wait_loaded(qtbot, w, a)
    assert load_of(w)[:2] == ("q8_0", "fast")
    s = w.settings
    assert s.tuning_by_path == {} and yours(s, w.host.identity) == {"kv_type": "q8_0", "exactness": "fast"}
    assert (s.kv_type, s.exactness) == ("auto", "exact")
    assert SettingsFile().load()[0] == s  # saved
    switch(qtbot, w, b)
    assert load_of(w)[:2] != ("q8_0", "fast")


def test_a_load_that_fails_with_the_model_s_own_load_settings_says_where_they_are(qtbot, make_window, models,
                                                                                  tmp_path):
    """The model set-up that last worked does not hold a model's own load settings, so going back to it cannot
    undo them: the message says where they are, and clearing them loads the model again."""
    a, _renamed, _b = models
    w = make_window()
    switch(qtbot, w, a)
    ia = w.host.identity
    gone = tmp_path / "deleted-draft.gguf"  # a draft chosen for A, deleted since
    w.apply_settings(with_yours(w.settings, ia, {"draft": str(gone), "n_threads": 1}))
    qtbot.waitUntil(lambda: not w.host.loading, timeout=60_000)
    assert w.host.model is None
    said = " | ".join(w.info.messages())
    assert "deleted-draft.gguf" in said and f"this model's own load settings (draft {gone}, n_threads 1)" in said
    assert "Settings → Sampling, This model" in said
    w.apply_settings(with_yours(w.settings, ia, {}))  # Clear: A loads with the settings for every model
    wait_loaded(qtbot, w, a)

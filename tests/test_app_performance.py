"""The window's tuning features on the real bundled model: the exact/fast choice,
"Benchmark this model" and the Performance panel (offscreen)."""
from __future__ import annotations

import pytest

from app.main_window import MainWindow
from app.selftest import send_and_wait, write_settings
from app.settings import SettingsFile


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def window(qtbot, data_dir):
    write_settings(max_tokens=24)
    w = MainWindow()
    w.show()
    w.start()
    qtbot.waitUntil(lambda: w.host.ready or not w.host.loading, timeout=60_000)
    assert w.host.ready, w.info.messages()
    yield w
    w.close()


def test_fast_profile_is_chosen_in_settings_and_the_window_says_what_it_means(qtbot, window):
    from app.model_loading import FAST_NOTE
    from app.settings_dialog import SettingsDialog

    w = window
    assert w.settings.exactness == "exact" and w.host.model["exactness"] == "exact"  # the default
    assert "fast" not in w.model_label.text()
    dlg = SettingsDialog(w.settings, w)
    qtbot.addWidget(dlg)
    assert dlg.exactness.currentData() == "exact" and "token for token" in dlg.exactness_note.text()
    dlg.exactness.setCurrentIndex(dlg.exactness.findData("fast"))
    assert "may differ slightly" in dlg.exactness_note.text()
    w.apply_settings(dlg.build())
    qtbot.waitUntil(lambda: w.host.ready and w.host.model.get("exactness") == "fast", timeout=60_000)
    assert w.model_label.text().endswith("fast kernels") and FAST_NOTE in w.model_label.toolTip()
    assert FAST_NOTE in w.info.messages()
    assert SettingsFile().load()[0].exactness == "fast"  # saved, so the next start loads it too
    reply = send_and_wait(w, "Say hello.")
    assert reply["text"] and not reply["error"], reply

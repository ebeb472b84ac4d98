"""Settings → Voice, the real page in the real dialog (offscreen), and the settings file's voice entry."""
from __future__ import annotations

import pytest
from PySide6.QtWidgets import QTabWidget

from app.core import voice_settings
from app.core.settings import Settings, SettingsError
from app.settings_ui import settings_voice_tab
from app.settings_ui.settings_voice_tab import VoiceTab
from app.voice.voice_controller import joined

CHOSEN = {"whisper": "bundled", "piper": "bundled", "language": "zh", "speed": 1.5, "speak_replies": True,
          "hands_free": False}


def test_the_dialog_keeps_the_voice_choices_and_shows_each_models_languages_size_and_licence(qtbot, data_dir):
    from app.settings_ui.settings_dialog import SettingsDialog

    dlg = SettingsDialog(Settings(voice=dict(CHOSEN)), None)
    qtbot.addWidget(dlg)
    tabs = dlg.findChild(QTabWidget)
    page = tabs.widget([tabs.tabText(i) for i in range(tabs.count())].index("Voice"))
    assert page.widget() is dlg.voice_tab  # in its scroll area (the dialog fits a laptop screen)
    assert dlg.build().voice == CHOSEN  # an OK keeps what was not touched
    t = dlg.voice_tab
    assert "English only" in t.whisper_info.text() and "MIT" in t.whisper_info.text()
    assert "hears English only: for Chinese (Simplified), choose a multilingual model" in t.whisper_info.text()
    t.language.setCurrentIndex(t.language.findData("en"))  # English: nothing to warn of
    assert "hears English only" not in t.whisper_info.text()
    t.language.setCurrentIndex(t.language.findData("zh"))
    assert "Joe" in t.piper_info.text() and "MiB" in t.piper_info.text()
    t.speed.setValue(2.0)
    t.hands_free.setChecked(True)
    assert dlg.build().voice == {**CHOSEN, "speed": 2.0, "hands_free": True}


def test_a_chosen_model_that_is_not_one_is_refused_with_the_reason(qtbot, tmp_path):
    t = VoiceTab(Settings())
    qtbot.addWidget(t)
    t._add(t.whisper, str(tmp_path))
    assert "faster-whisper model folder" in t.whisper_info.text()
    with pytest.raises(SettingsError, match="faster-whisper model folder"):
        t.values()


def test_without_voice_installed_the_page_says_how_and_keeps_the_settings(qtbot, monkeypatch):
    monkeypatch.setattr(settings_voice_tab, "voice_installed", lambda: False)  # an install without --voice
    t = VoiceTab(Settings(voice=dict(CHOSEN)))
    qtbot.addWidget(t)
    assert t.values() == {"voice": CHOSEN}


@pytest.mark.parametrize("bad, says", [
    ({**voice_settings.default(), "speed": 9}, "speed"), ({**voice_settings.default(), "language": "xx"}, "language"),
    ({"whisper": "bundled"}, "must hold"), ({**voice_settings.default(), "hands_free": "yes"}, "hands_free"),
])
def test_a_bad_voice_entry_is_refused_by_name_and_salvaged_alone(bad, says):
    with pytest.raises(SettingsError, match=says):
        Settings(voice=bad).validate()
    kept, problems = Settings.salvage({"voice": bad, "theme": "dark"})
    assert kept.voice == voice_settings.default() and kept.theme == "dark" and problems


def test_dictation_continues_the_box_as_a_sentence_would():
    assert joined("Can you explain how it makes", "The second question faster.") == " the second question faster."
    assert joined("Done.", "The next one.") == " The next one."
    assert joined("Done. ", "The next one.") == "The next one."  # after a space: none added, the capital kept
    assert joined("", "The first.") == "The first."
    assert joined("Tell me ", "I think so.") == "I think so."
    assert joined("NASA and", "NASA again") == " NASA again"


def test_a_hub_repository_typed_in_is_kept_and_downloaded_only_when_used(qtbot, monkeypatch):
    from engine.voice import models

    monkeypatch.setattr(models, "_from_hub", lambda *a: pytest.fail("downloaded on the GUI thread"))
    t = VoiceTab(Settings())
    qtbot.addWidget(t)
    t.whisper.setEditText("Systran/faster-whisper-small")
    t.piper.setEditText("rhasspy/piper-voices:en/en_US/lessac/medium/en_US-lessac-medium.onnx")
    t._describe()
    assert "downloaded from the Hugging Face Hub the first time" in t.whisper_info.text()
    v = t.values()["voice"]
    assert v["whisper"] == "Systran/faster-whisper-small" and v["piper"].startswith("rhasspy/piper-voices:en/")


@pytest.mark.parametrize("language, locale, whisper, script", [
    ("zh", "en_US", "zh", "simplified"), ("zh-Hant", "zh_CN", "zh", "traditional"),
    ("auto", "zh_TW", None, "traditional"), ("auto", "zh_HK", None, "traditional"),
    ("auto", "zh_CN", None, "simplified"),
    ("auto", "", None, "simplified"), ("en", "zh_TW", "en", "traditional"),
])
def test_chinese_is_written_in_the_script_chosen_or_the_systems(language, locale, whisper, script):
    v = {**voice_settings.default(), "language": language}
    assert Settings(voice=v).validate().voice["language"] == language
    assert voice_settings.language(v) == whisper and voice_settings.chinese_script(v, locale) == script

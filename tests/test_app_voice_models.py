"""Speech models as models in the real window (offscreen): the library lists them with size and fit and
switches between them; a Hub model that is not in the cache downloads on first use with its progress
shown, while what the user says waits; the local API speaks with the window's own models; and a
machine with no sound server has no microphone, said in one line. The tests' local Hub
(tests/hub_server.py) serves the bundled models' files as Hub repositories."""
from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace

from pathlib import Path

from PySide6.QtWidgets import QMessageBox

from engine.voice.models import piper_voice, whisper_model
from test_app_voice import KIT, say, spoken

HUB_WHISPER = "acme/faster-whisper-tiny.en"


def _window(make_window, **voice):
    from app.core.settings import SettingsFile
    from app.window.selftest import write_settings

    write_settings(max_tokens=24, temperature=0.0, seed=0)
    f = SettingsFile()
    s, _ = f.load()
    s.voice.update(voice)
    f.save(s)
    return make_window(write=False)


def test_the_library_lists_speech_models_with_size_and_fit_and_uses_and_deletes_them(make_window, speech_hub, qtbot):
    whisper_model(HUB_WHISPER)  # downloaded earlier: in the cache
    w = _window(make_window)
    w.show_library()
    speech = w.models_dock.speech
    assert speech is not None and speech.isVisible()
    qtbot.waitUntil(lambda: len(speech.models) == 3, timeout=30_000)
    rows = {(speech.table.item(r, 0).text(), speech.table.item(r, 1).text()) for r in range(3)}
    assert ("Joe, US English (bundled)", "Read-aloud (in use)") in rows
    assert (HUB_WHISPER, "Dictation") in rows and any(u == "Dictation (in use)" for _n, u in rows)
    assert speech.fit_of(HUB_WHISPER, "whisper") == "CPU only"
    r = next(i for i, m in enumerate(speech.models) if m.spec == HUB_WHISPER)
    assert speech.table.item(r, 3).text() == "74.5 MiB" and speech.table.item(r, 5).text() == "HF cache"
    assert "of RAM while it works" in speech.table.item(r, 4).toolTip()

    assert speech.select("bundled", "piper") and not speech.delete_button.isEnabled()  # ships with Hearth
    assert speech.select(HUB_WHISPER, "whisper") and speech.use_button.isEnabled()
    speech.use_button.click()  # dictation now uses the Hub download (loaded on its next use)
    assert w.settings.voice["whisper"] == HUB_WHISPER and w.voice.kit.choice.whisper == HUB_WHISPER
    qtbot.waitUntil(lambda: speech.table.item(r, 1).text() == "Dictation (in use)", timeout=30_000)

    speech.select(HUB_WHISPER, "whisper")
    speech.delete_button.click()  # in use: refused, and it stays
    speech.confirm.done(QMessageBox.StandardButton.Yes)
    assert "is in use" in speech.status.text() and len(speech.models) == 3
    speech.select("bundled", "whisper")
    speech.use_button.click()
    qtbot.waitUntil(lambda: not speech.scanning, timeout=30_000)
    speech.select(HUB_WHISPER, "whisper")
    speech.delete_button.click()
    speech.confirm.done(QMessageBox.StandardButton.Yes)
    qtbot.waitUntil(lambda: len(speech.models) == 2, timeout=30_000)
    assert speech.status.text() == f"Deleted {HUB_WHISPER}." and w.settings.voice["whisper"] == "bundled"


def test_a_hub_model_not_in_the_cache_downloads_with_its_progress_while_the_words_wait(
        make_window, speech_hub, sound, qtbot, tmp_path):
    w = _window(make_window, whisper=HUB_WHISPER)
    assert w.voice.kit.choice.whisper == HUB_WHISPER
    notices: list[str] = []
    w.voice.mic_button.click()
    w.voice.dictation.downloading.connect(lambda spec, done, total: notices.append(" ".join(w.info.messages())))
    say(qtbot, sound, spoken(tmp_path, "The weather is nice today."))
    w.voice.mic_button.click()
    qtbot.waitUntil(lambda: "weather" in w.chat.input.toPlainText().lower(), timeout=60_000)
    assert any(f"Downloading the speech model {HUB_WHISPER} from the Hugging Face Hub" in n for n in notices)
    assert not any("Downloading" in m for m in w.info.messages())  # gone once the model is here
    assert whisper_model(HUB_WHISPER).path.is_dir()  # in the cache now: offline from here on


def test_a_hub_voice_that_cannot_be_downloaded_says_so_in_one_line(make_window, speech_hub, qtbot):
    speech_hub.down = True
    w = _window(make_window, piper="acme/piper-voices:en/missing.onnx")
    w.voice.speak_reply(1, "Hello there.")
    qtbot.waitUntil(lambda: any("could not be downloaded" in m for m in w.info.messages()), timeout=30_000)
    assert not w.voice.read_aloud.active


def test_the_local_api_speaks_with_the_windows_own_models(make_window, qtbot, tmp_path):
    import httpx

    from test_app_server import free_port

    w = _window(make_window)
    w.voice.use(KIT)
    port = free_port()
    w.apply_settings(replace(w.settings, server_enabled=True, server_port=port, server_api_key="k-123"))
    assert w.server_host.server.audio.kit is w.voice.kit is KIT  # one Whisper and one Piper in the process
    url = f"http://127.0.0.1:{port}/v1/audio/speech"
    headers = {"Authorization": "Bearer k-123"}
    r = httpx.post(url, json={"model": "tts-1", "input": "Hello.", "voice": "alloy", "response_format": "wav"},
                   headers=headers, timeout=120)
    assert r.status_code == 200 and r.headers["X-Hearth-Voice"] == "Joe, US English (bundled)"

    own = tmp_path / "kathleen.onnx"  # Settings → Voice: another voice; the API follows at once
    shutil.copyfile(piper_voice().path, own)
    shutil.copyfile(piper_voice().config_path, tmp_path / "kathleen.onnx.json")
    w.apply_settings(replace(w.settings, voice={**w.settings.voice, "piper": str(own)}))
    assert w.server_host.server.audio.kit is w.voice.kit and w.voice.kit is not KIT
    r = httpx.post(url, json={"model": "tts-1", "input": "Hello.", "voice": "alloy", "response_format": "wav"},
                   headers=headers, timeout=120)
    assert r.status_code == 200 and r.headers["X-Hearth-Voice"] == "kathleen"


def test_with_no_sound_server_there_is_no_microphone_and_it_says_so(tmp_path):
    code = ("import sys\n"
            "from PySide6.QtWidgets import QApplication\n"
            "app = QApplication(sys.argv)\n"
            "from app.voice.devices import Microphone\n"
            "m = Microphone()\n"
            "said = []\n"
            "m.failed.connect(said.append)\n"
            "print(m.start(), said)\n")
    env = {"PATH": "/usr/bin:/bin", "QT_QPA_PLATFORM": "offscreen", "HOME": str(tmp_path),
           "PULSE_SERVER": f"unix:{tmp_path}/no-such-socket", "XDG_RUNTIME_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ('False ["No microphone was found: connect one, or check the system\'s '
                                  'sound settings"]')

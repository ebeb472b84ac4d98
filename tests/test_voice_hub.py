"""Speech models from the Hugging Face Hub, through the download code every model uses, against the tests'
local Hub (tests/hub_server.py): a faster-whisper repository (its optional files taken where it has them)
and one Piper voice out of a repository of many; offline, the cached copy; a repository that is not a
speech model says so."""
from __future__ import annotations

import numpy as np
import pytest

from engine.voice.listen import Transcriber
from engine.voice.models import VoiceUnavailable, piper_voice, whisper_model
from engine.voice.speak import Voice
from hub_server import HubServer


@pytest.fixture
def hub(monkeypatch, tmp_path):
    whisper = whisper_model()  # the bundled one's files, served as if they were a Hub repository
    voice = piper_voice()
    repos = {
        "acme/faster-whisper-tiny.en": {f.name: f.read_bytes() for f in whisper.path.iterdir() if f.is_file()},
        "acme/piper-voices": {"en/en_US/joe/medium/" + voice.path.name: voice.path.read_bytes(),
                              "en/en_US/joe/medium/" + voice.path.name + ".json":
                                  (voice.path.parent / (voice.path.name + ".json")).read_bytes(),
                              "README.md": b"voices"},
        "acme/not-speech": {"config.json": b"{}", "model.safetensors": b"\0" * 64},
    }
    srv = HubServer(repos)
    monkeypatch.setenv("HF_ENDPOINT", srv.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    yield srv
    srv.close()


def test_a_whisper_repository_downloads_and_transcribes(hub):
    m = whisper_model("acme/faster-whisper-tiny.en")
    assert m.name == "acme/faster-whisper-tiny.en" and m.languages == "English only"
    assert {"model.bin", "config.json", "tokenizer.json", "vocabulary.txt"} <= {f.name for f in m.path.iterdir()}
    assert Transcriber(m, threads=2).transcribe(np.zeros(16000, np.float32)).text == ""


def test_one_piper_voice_out_of_many_and_offline_the_cached_copy(hub, monkeypatch):
    spec = "acme/piper-voices:en/en_US/joe/medium/en_US-joe-medium.onnx"
    m = piper_voice(spec)
    assert m.path.name == "en_US-joe-medium.onnx" and not (m.path.parents[3] / "README.md").exists()
    assert len(Voice(m, threads=2, variation=False).speak("Hello.")) > 1000
    hub.down = True  # the Hub cannot be reached: the cached copy is used
    assert piper_voice(spec).path == m.path


def test_a_repository_that_is_not_a_speech_model_says_so(hub):
    with pytest.raises(VoiceUnavailable, match="has no file model.bin"):
        whisper_model("acme/not-speech")
    with pytest.raises(VoiceUnavailable, match="could not be downloaded"):
        piper_voice("acme/piper-voices:en/missing.onnx")

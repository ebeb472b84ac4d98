"""Speech models from the Hugging Face Hub, through the download code every model uses, against the tests'
local Hub (tests/hub_server.py): a faster-whisper repository (its optional files taken where it has them)
and one Piper voice out of a repository of many; offline, the cached copy; a repository that is not a
speech model says so."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from engine.voice.listen import Transcriber
from engine.voice.models import VoiceUnavailable, piper_voice, whisper_model
from engine.voice.speak import Voice


def test_a_whisper_repository_downloads_and_transcribes(speech_hub):
    m = whisper_model("acme/faster-whisper-tiny.en")
    assert m.name == "acme/faster-whisper-tiny.en" and m.languages == "English only"
    assert {"model.bin", "config.json", "tokenizer.json", "vocabulary.txt"} <= {f.name for f in m.path.iterdir()}
    assert Transcriber(m, threads=2).transcribe(np.zeros(16000, np.float32)).text == ""


def test_one_piper_voice_out_of_many_and_offline_the_cached_copy(speech_hub, monkeypatch):
    spec = "acme/piper-voices:en/en_US/joe/medium/en_US-joe-medium.onnx"
    m = piper_voice(spec)
    assert m.path.name == "en_US-joe-medium.onnx" and not (m.path.parents[3] / "README.md").exists()
    assert len(Voice(m, threads=2, variation=False).speak("Hello.")) > 1000
    speech_hub.down = True  # the Hub cannot be reached: the cached copy is used
    assert piper_voice(spec).path == m.path


def test_a_repository_that_is_not_a_speech_model_says_so(speech_hub):
    with pytest.raises(VoiceUnavailable, match="has no file model.bin"):
        whisper_model("acme/not-speech")
    with pytest.raises(VoiceUnavailable, match="could not be downloaded"):
        piper_voice("acme/piper-voices:en/missing.onnx")


def test_a_download_reports_its_bytes_and_a_cancelled_one_resumes(speech_hub):
    import threading

    from engine.models.hub import DownloadCancelled

    speech_hub.throttle = 0.0005  # seconds per 4 KiB: the transfer lasts long enough to be stopped
    stop, seen = threading.Event(), []

    def cut(done, total, name):
        seen.append((done, total))
        if done > 4 << 20:
            stop.set()

    with pytest.raises(DownloadCancelled):
        whisper_model("acme/faster-whisper-tiny.en", progress=cut, cancel=stop)
    speech_hub.throttle = 0
    after: list[tuple[int, int]] = []
    m = whisper_model("acme/faster-whisper-tiny.en", progress=lambda d, t, _n: after.append((d, t)))
    total = m.size_bytes
    assert seen[-1][1] == total and after[-1] == (total, total)
    assert after[0][0] >= seen[-1][0] - (1 << 20)  # it went on from the bytes it had, not from 0


def test_the_library_lists_speech_models_with_their_size_and_fit_and_deletes_downloads(speech_hub, tmp_path):
    from engine.library.errors import LibraryError
    from engine.library.local import FIT_CPU, FIT_NO
    from engine.sizing.hardware import simulated
    from engine.voice.on_disk import delete_speech_model, speech_fit, speech_models_on_disk

    cache = tmp_path / "hub-cache"
    whisper_model("acme/faster-whisper-tiny.en")
    voice_spec = "acme/piper-voices:en/en_US/joe/medium/en_US-joe-medium.onnx"
    piper_voice(voice_spec)
    own = tmp_path / "mine" / "voice.onnx"  # a voice the user chose by path, outside every cache
    own.parent.mkdir()
    own.write_bytes(piper_voice().path.read_bytes())
    own.with_name("voice.onnx.json").write_bytes(piper_voice().config_path.read_bytes())
    fetched = tmp_path / "models" / "faster-whisper-tiny"  # as `models fetch-whisper-base` puts one
    shutil.copytree(whisper_model().path, fetched, copy_function=os.link)
    (tmp_path / "models" / "half").mkdir()  # a folder that is no model: not listed
    listed = speech_models_on_disk(cache, chosen=[str(own), "bundled", "acme/elsewhere"])
    assert sorted((m.kind, m.spec, m.origin) for m in listed) == sorted([
        ("piper", voice_spec, "HF cache"), ("piper", str(own), ""), ("piper", "bundled", "bundled"),
        ("whisper", "acme/faster-whisper-tiny.en", "HF cache"), ("whisper", "bundled", "bundled"),
        ("whisper", str(fetched), "models folder")])
    found = {m.spec: m for m in listed}
    hub_whisper = found["acme/faster-whisper-tiny.en"]
    assert hub_whisper.origin == "HF cache" and hub_whisper.languages == "English only"
    assert found[voice_spec].languages == "English" and found[voice_spec].size_bytes > 60e6
    speech_hub.down = True  # each listed spec is one Settings → Voice can use, offline
    assert whisper_model(hub_whisper.spec).path == hub_whisper.path
    assert piper_voice(voice_spec).path == found[voice_spec].path
    badge, line = speech_fit(hub_whisper, simulated("none", "8GiB"))
    assert badge == FIT_CPU and "MiB of RAM" in line and "8.00 GiB available" in line
    assert speech_fit(found[voice_spec], simulated("none", "100MiB"))[0] == FIT_NO
    with pytest.raises(LibraryError, match="only those are deleted"):
        delete_speech_model(found["bundled"], cache)
    delete_speech_model(hub_whisper, cache)
    delete_speech_model(found[voice_spec], cache)
    delete_speech_model(found[str(fetched)], cache)
    with pytest.raises(LibraryError, match="only those are deleted"):
        delete_speech_model(found[str(own)], cache)
    assert own.is_file() and not fetched.exists()
    assert [m.origin for m in speech_models_on_disk(cache)] == ["bundled", "bundled"]
    assert not list(cache.glob("models--acme--faster-whisper-tiny.en/blobs/*"))
    assert list(cache.glob("models--acme--piper-voices/snapshots/*/README.md")) == []  # never downloaded


def test_half_a_downloaded_model_is_not_listed(speech_hub, tmp_path):
    from engine.voice.on_disk import speech_models_on_disk

    whisper_model("acme/faster-whisper-tiny.en")
    next((tmp_path / "hub-cache").glob("models--acme--faster-whisper-tiny.en/snapshots/*/model.bin")).unlink()
    assert "acme/faster-whisper-tiny.en" not in {m.spec for m in speech_models_on_disk(tmp_path / "hub-cache")}

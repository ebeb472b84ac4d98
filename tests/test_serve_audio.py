"""The server's audio routes through the official openai client: /v1/audio/transcriptions hears espeak-ng,
/v1/audio/speech speaks with Piper (and Whisper hears it back), and bad input is one clear error."""
from __future__ import annotations

import httpx
import numpy as np
import openai
import pytest

from engine.serve.http import audio_routes
from engine.serve.http.audio_routes import AudioRoutes
from engine.serve.http.server import LocalServer
from engine.voice.audio import encode_audio, read_audio
from engine.voice.kit import VoiceChoice, VoiceKit
from engine.voice.words import error_rate
from speech import SENTENCES, espeak, silence, two_hours


@pytest.fixture(scope="module")
def server():
    # no chat model (not needed); Piper without its sampled noise, so its speech is the same every run
    srv = LocalServer(port=0, audio=AudioRoutes(VoiceKit(VoiceChoice(threads=2, variation=False))))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def spoken(tmp_path_factory):
    said = SENTENCES[0]
    samples = np.concatenate([silence(0.3), espeak(said, tmp_path_factory.mktemp("speech")), silence(0.3)])
    return said, encode_audio(samples, 16000, "wav")


def test_a_transcription_in_each_format(client, spoken):
    said, wav = spoken
    plain = client.audio.transcriptions.create(model="whisper-1", file=("said.wav", wav))
    assert error_rate(said, plain.text) <= 0.2, plain.text
    verbose = client.audio.transcriptions.create(model="whisper-1", file=("said.wav", wav),
                                                 response_format="verbose_json")
    assert verbose.language == "en" and abs(verbose.duration - len(wav) / 32000) < 0.1
    assert verbose.segments and verbose.segments[0].text and verbose.text == plain.text
    srt = client.audio.transcriptions.create(model="whisper-1", file=("said.wav", wav), response_format="srt")
    assert srt.startswith("1\n00:00:0") and " --> " in srt
    vtt = client.audio.transcriptions.create(model="whisper-1", file=("said.wav", wav), response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:0")
    text = client.audio.transcriptions.create(model="whisper-1", file=("said.wav", wav), response_format="text")
    assert text.strip() == plain.text


def test_speech_in_mp3_is_heard_back_as_written(client):
    written = "Bread rises because yeast makes small bubbles of gas. Bake it when it has doubled."
    mp3 = client.audio.speech.create(model="tts-1", voice="alloy", input=written).read()
    assert mp3[:3] == b"ID3" or mp3[:2] == b"\xff\xfb"
    heard = client.audio.transcriptions.create(model="whisper-1", file=("speech.mp3", mp3)).text
    assert error_rate(written, heard) <= 0.15, heard


def test_pcm_speech_streams_a_sentence_at_a_time(client):
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="nova", input="One. Two three. Four five six.", response_format="pcm") as r:
        parts = [len(c) for c in r.iter_bytes(chunk_size=None)]
    assert sum(parts) % 2 == 0 and sum(parts) > 24000  # 24 kHz 16-bit: over half a second


@pytest.mark.parametrize("data, says", [
    (b"", "empty"), (b"this is not audio" * 50, "not an audio file"),
])
def test_bad_audio_is_a_400_that_says_why(client, data, says):
    with pytest.raises(openai.BadRequestError, match=says):
        client.audio.transcriptions.create(model="whisper-1", file=("x.wav", data))


def test_a_two_hour_file_is_refused_at_once(client):
    with pytest.raises(openai.BadRequestError, match="2:00:00 long; the most taken is 30:00"):
        client.audio.transcriptions.create(model="whisper-1", file=("long.flac", two_hours()))


def test_an_upload_over_25_mib_is_a_413_without_being_read(server):
    big = b"\0" * (audio_routes.MAX_AUDIO_BYTES + (1 << 20))
    r = httpx.post(f"http://127.0.0.1:{server.port}/v1/audio/transcriptions", files={"file": ("big.wav", big)},
                   timeout=60)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize("body, param", [
    ({"model": "tts-1", "voice": "alloy", "input": "x" * 4097}, "input"),
    ({"model": "tts-1", "voice": "alloy", "input": "   "}, "input"),
    ({"model": "tts-1", "voice": "alloy", "input": "Hi.", "speed": 9}, "speed"),
    ({"model": "tts-1", "voice": "alloy", "input": "Hi.", "response_format": "midi"}, "response_format"),
])
def test_bad_speech_requests_name_their_field(server, body, param):
    r = httpx.post(f"http://127.0.0.1:{server.port}/v1/audio/speech", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_a_transcription_that_is_not_a_form_says_how_to_send_it(server):
    r = httpx.post(f"http://127.0.0.1:{server.port}/v1/audio/transcriptions", json={"file": "x"}, timeout=60)
    assert r.status_code == 400 and "multipart/form-data" in r.json()["error"]["message"]


def test_a_server_with_a_key_asks_for_it_on_the_audio_routes_too(spoken):
    srv = LocalServer(port=0, api_key="sesame")
    srv.start()
    try:
        url = f"http://127.0.0.1:{srv.port}/v1"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).audio.speech.create(
                model="tts-1", voice="alloy", input="Hi.")
    finally:
        srv.stop()


def test_without_voice_installed_the_routes_say_how_to_install_it(server, monkeypatch):
    monkeypatch.setattr(audio_routes, "voice_installed", lambda: False)  # as on an install without --voice
    r = httpx.post(f"http://127.0.0.1:{server.port}/v1/audio/speech", json={"input": "Hi."}, timeout=60)
    assert r.status_code == 501 and "scripts/setup.py --voice" in r.json()["error"]["message"]


def test_speech_read_back_by_the_server_decoder_is_its_length(client):
    wav = client.audio.speech.create(model="tts-1", voice="alloy", input="Hello.", response_format="wav").read()
    assert 0.3 < read_audio(wav, max_seconds=10).seconds < 3


# -- speech models by name ----------------------------------------------------------------------------------------

CHINESE = "今天天气很好，我想去公园散步。"


@pytest.fixture(scope="module")
def chinese(tmp_path_factory):
    samples = np.concatenate([silence(0.3), espeak(CHINESE, tmp_path_factory.mktemp("zh"), voice="cmn"), silence(0.3)])
    return encode_audio(samples, 16000, "wav")


def test_a_model_not_installed_is_a_404_that_names_the_installed_ones(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.audio.transcriptions.create(model="whisper-large-v9", file=("x.wav", encode_audio(silence(1), 16000,
                                                                                                 "wav")))
    msg = str(e.value)
    assert "no Whisper called 'whisper-large-v9' is installed here" in msg and "bundled (English only)" in msg
    assert "whisper-1 means the one chosen in Settings → Voice" in msg
    with pytest.raises(openai.NotFoundError, match="no Piper voice called 'nobody' is installed here"):
        client.audio.speech.create(model="nobody", voice="alloy", input="Hello.").read()


def test_a_language_the_chosen_model_cannot_hear_is_a_400_naming_one_that_can(client, chinese):
    from engine.voice.fetch import whisper_base_path

    assert whisper_base_path() is not None, "Whisper base is not fetched: python -m engine models fetch-whisper-base"
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.transcriptions.create(model="whisper-1", file=("zh.wav", chinese), language="zh")
    msg = str(e.value)
    assert "the speech model Whisper tiny.en (bundled) hears English only, so it cannot transcribe language 'zh'" in msg
    assert "faster-whisper-base is installed and can: send model=faster-whisper-base" in msg


def test_model_names_an_installed_multilingual_whisper(client, chinese):
    got = client.audio.transcriptions.create(model="faster-whisper-base", file=("zh.wav", chinese), language="zh",
                                             response_format="verbose_json")
    # espeak-ng's Mandarin is robotic and Whisper base small: what it hears is Chinese, not what was said word for word
    assert got.language == "zh" and sum("\u4e00" <= c <= "\u9fff" for c in got.text) >= 3, got.text


def test_model_names_a_piper_voice_by_its_file(client):
    mp3 = client.audio.speech.create(model="en_US-joe-medium", voice="alloy", input="Bread rises.").read()
    assert len(mp3) > 1000

"""OpenAI's audio routes: ``POST /v1/audio/transcriptions`` and ``POST /v1/audio/speech``.

Open WebUI and other OpenAI clients can then use Hearth for voice. The same
guard as every route checks the Host, the Origin and, off loopback, the key.
A transcription's upload is read up to MAX_AUDIO_BYTES (OpenAI's 25 MB) before
its form is parsed, and its audio is refused over MAX_AUDIO_S before it is
decoded where the container says its length. ``model`` names an installed speech model (OpenAI's names mean
the chosen one: audio_models.py). Speech takes up to MAX_SPEECH_CHARS
characters (OpenAI's limit); ``pcm`` is streamed sentence by sentence, so a
client can play the first sentence while the rest is spoken. Each call runs on
a worker thread; the models are loaded on first use and kept (engine/voice/kit.py).
"""
from __future__ import annotations

from typing import Any, Callable

import anyio
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from ...errors import HearthError
from ...voice import voice_installed
from ...voice.audio import FORMATS, AudioError, encode_audio, read_audio
from ...voice.kit import VoiceKit
from ...voice.models import SETUP_HINT
from ...voice.sentences import speakable_sentences
from ...voice.speak import MAX_SPEED, MIN_SPEED
from ..protocols.errors import ApiError, bad
from .audio_models import SpeechModels
from .body import error_response, read_body, read_json

MAX_AUDIO_BYTES = 25 << 20
MAX_AUDIO_S = 30 * 60.0
MAX_SPEECH_CHARS = 4096
TRANSCRIPT_FORMATS = ("json", "text", "verbose_json", "srt", "vtt")
_MEDIA = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac", "wav": "audio/wav",
          "pcm": "audio/pcm"}


class AudioRoutes:
    """The two endpoints, over one :class:`VoiceKit` (a transcriber and a voice, loaded on first use)."""

    def __init__(self, kit: VoiceKit | Callable[[], VoiceKit] | None = None) -> None:
        """``kit``: the models, or a callable giving the ones to use now (the window passes its own,
        so the API and the window share one Whisper and one Piper, as Settings → Voice chose them).
        A request's ``model`` may name another installed speech model (audio_models.py)."""
        self._kit = kit or VoiceKit()
        self.models = SpeechModels(lambda: self.kit)

    @property
    def kit(self) -> VoiceKit:
        return self._kit() if callable(self._kit) else self._kit

    def routes(self) -> list[tuple[str, Any, str]]:
        return [("/v1/audio/transcriptions", self.transcriptions, "POST"),
                ("/v1/audio/speech", self.speech, "POST")]

    async def transcriptions(self, request: Request) -> Response:
        try:
            _installed()
            form = await _form(request)
            audio, fmt, options = _transcription_request(form)
            model = str(form.get("model") or "")
            transcript = await anyio.to_thread.run_sync(lambda: self._transcribe(audio, options, model))
        except ApiError as e:
            return error_response(e, request.url.path)
        return _transcript_response(transcript, fmt)

    def _transcribe(self, audio: bytes, options: dict[str, Any], model: str):
        try:
            sound = read_audio(audio, max_seconds=MAX_AUDIO_S, max_bytes=MAX_AUDIO_BYTES)
        except AudioError as e:
            raise ApiError(400, str(e), param="file", code="invalid_audio") from None
        try:
            return self.models.transcriber(model, options.get("language")).transcribe(sound.samples, **options)
        except HearthError as e:
            raise ApiError(503, str(e), type="server_error", code="voice_unavailable") from None

    async def speech(self, request: Request) -> Response:
        try:
            _installed()
            body = await read_json(request, 1 << 20)
            text, fmt, speed = _speech_request(body)
            model = body.get("model") if isinstance(body.get("model"), str) else ""
            voice = await anyio.to_thread.run_sync(lambda: self._voice(model))
        except ApiError as e:
            return error_response(e, request.url.path)
        sentences = speakable_sentences(text) or [text]
        headers = {"X-Hearth-Voice": voice.model.name}
        if fmt == "pcm":  # raw samples: sent a sentence at a time, as each is spoken
            async def chunks():
                for sentence in sentences:
                    pcm = await anyio.to_thread.run_sync(lambda s=sentence: voice.speak(s, speed=speed))
                    yield encode_audio(pcm, voice.rate, "pcm")
            return StreamingResponse(chunks(), media_type=_MEDIA[fmt], headers=headers)

        def whole() -> bytes:
            import numpy as np
            parts = [voice.speak(s, speed=speed) for s in sentences]
            return encode_audio(np.concatenate(parts), voice.rate, fmt)
        return Response(await anyio.to_thread.run_sync(whole), media_type=_MEDIA[fmt], headers=headers)

    def _voice(self, model: str):
        try:
            return self.models.voice(model)
        except HearthError as e:
            raise ApiError(503, str(e), type="server_error", code="voice_unavailable") from None


def _installed() -> None:
    if not voice_installed():
        raise ApiError(501, f"voice is not installed on this server; install it with: {SETUP_HINT}",
                       type="server_error", code="voice_not_installed")


async def _form(request: Request):
    kind = request.headers.get("content-type", "")
    if not kind.startswith("multipart/form-data"):
        raise ApiError(400, "send the audio as multipart/form-data with a 'file' part, as OpenAI's clients do",
                       code="invalid_request")
    data = await read_body(request, MAX_AUDIO_BYTES + (64 << 10))  # the file and a few small fields

    async def replay():
        return {"type": "http.request", "body": data, "more_body": False}
    try:
        return await Request(request.scope, replay).form(max_files=1, max_fields=16, max_part_size=64 << 10)
    except Exception as e:  # starlette's MultiPartException and the parser's own errors
        raise ApiError(400, f"the multipart form cannot be read: {e}", code="invalid_request") from None


def _transcription_request(form) -> tuple[bytes, str, dict[str, Any]]:
    file = form.get("file")
    if not isinstance(file, UploadFile):
        raise bad("file", "the form needs a 'file' part holding the audio")
    audio = file.file.read()
    fmt = str(form.get("response_format") or "json")
    if fmt not in TRANSCRIPT_FORMATS:
        raise bad("response_format", f"response_format must be one of {', '.join(TRANSCRIPT_FORMATS)}")
    options: dict[str, Any] = {"language": (str(form.get("language") or "") or None),
                               "prompt": (str(form.get("prompt") or "") or None)}
    try:
        temperature = float(str(form.get("temperature") or 0))
    except ValueError:
        raise bad("temperature", "temperature must be a number from 0 to 1") from None
    if not 0 <= temperature <= 1:
        raise bad("temperature", "temperature must be a number from 0 to 1")
    options["temperature"] = temperature
    return audio, fmt, options


def _transcript_response(t, fmt: str) -> Response:
    if fmt == "text":
        return PlainTextResponse(t.text)
    if fmt in ("srt", "vtt"):
        return PlainTextResponse(_subtitles(t.segments, fmt), media_type="text/vtt" if fmt == "vtt" else "text/plain")
    if fmt == "verbose_json":
        return JSONResponse({"task": "transcribe", "language": t.language, "duration": round(t.seconds, 3),
                             "text": t.text, "segments": [
                                 {"id": i, "start": round(a, 3), "end": round(b, 3), "text": s}
                                 for i, (a, b, s) in enumerate(t.segments)]})
    return JSONResponse({"text": t.text})


def _subtitles(segments: list[tuple[float, float, str]], fmt: str) -> str:
    sep = "," if fmt == "srt" else "."

    def stamp(s: float) -> str:
        ms = int(round(s * 1000))
        return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}{sep}{ms % 1000:03d}"
    cues = [f"{i}\n{stamp(a)} --> {stamp(b)}\n{s}\n" for i, (a, b, s) in enumerate(segments, 1)]
    if fmt == "vtt":
        return "WEBVTT\n\n" + "\n".join(c.split("\n", 1)[1] for c in cues)
    return "\n".join(cues)


def _speech_request(body: Any) -> tuple[str, str, float]:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_request")
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise bad("input", "'input' must be the text to speak")
    if len(text) > MAX_SPEECH_CHARS:
        raise bad("input", f"'input' is {len(text):,} characters; the most spoken at once is {MAX_SPEECH_CHARS:,}")
    fmt = body.get("response_format", "mp3")
    if fmt not in FORMATS:
        raise bad("response_format", f"response_format must be one of {', '.join(FORMATS)}")
    speed = body.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not MIN_SPEED <= speed <= MAX_SPEED:
        raise bad("speed", f"speed must be a number from {MIN_SPEED} to {MAX_SPEED}")
    voice = body.get("voice", "alloy")
    if isinstance(voice, dict):
        voice = voice.get("id", "")
    if not isinstance(voice, str) or not voice:
        raise bad("voice", "'voice' must name a voice")
    return text, fmt, float(speed)

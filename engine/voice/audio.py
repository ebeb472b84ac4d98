"""Reading and writing audio: any container PyAV opens, checked before it is decoded.

Dictation and the server's transcriptions take mono float32 at 16 kHz, Whisper's
rate. A file is checked before its samples are decoded: a size limit, an
audio track, and a duration limit read from the container where it says one
(a 2-hour file is refused at once, not after minutes of decoding), else counted
while decoding and stopped at the limit. Every refusal is an :class:`AudioError`
with one line for people. Speech goes out as WAV (the standard library), raw
16-bit PCM, or whatever PyAV's encoders give (MP3, FLAC, Opus, AAC).
"""
from __future__ import annotations

import io
import wave
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import HearthError

SAMPLE_RATE = 16000                            # what Whisper takes
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")  # OpenAI's /v1/audio/speech formats
PCM_RATE = 24000                               # OpenAI's "pcm": 24 kHz, 16-bit signed, little-endian, mono
_CONTAINERS = {"mp3": ("mp3", "libmp3lame"), "opus": ("ogg", "libopus"), "aac": ("adts", "aac"),
               "flac": ("flac", "flac")}
_OPUS_RATE = 48000                             # the rates libopus takes: 8, 12, 16, 24 or 48 kHz


class AudioError(HearthError):
    """Audio that cannot be used: not audio, no audio track, empty, too long, too large."""


@dataclass(frozen=True)
class Sound:
    """Mono samples at ``rate`` Hz: float32 in [-1, 1] (``samples``)."""
    samples: np.ndarray
    rate: int

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.rate


def clock(seconds: float) -> str:
    """``seconds`` as h:mm:ss or m:ss, as people read a duration."""
    s = int(round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def pcm16_to_float(data: bytes) -> np.ndarray:
    """Signed 16-bit little-endian samples (what a microphone gives) as float32 in [-1, 1]."""
    return np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0


def level_dbfs(samples: np.ndarray) -> float:
    """The loudness of a chunk (RMS, in dB below full scale; -100 for silence): the window's meter."""
    if len(samples) == 0:
        return -100.0
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
    return max(-100.0, 20.0 * np.log10(rms)) if rms > 0 else -100.0


def read_audio(data: bytes, *, max_seconds: float, max_bytes: int | None = None,
               rate: int = SAMPLE_RATE) -> Sound:
    """The audio in ``data`` (a file's bytes, any container PyAV opens) as mono float32 at ``rate``."""
    if max_bytes is not None and len(data) > max_bytes:
        raise AudioError(f"the audio file is {len(data) / 2**20:.1f} MiB; the most taken is "
                         f"{max_bytes / 2**20:.0f} MiB")
    if not data:
        raise AudioError("the audio file is empty")
    import av  # faster-whisper's own decoder: an optional install, imported only when audio comes

    try:
        container = av.open(io.BytesIO(data), mode="r", metadata_errors="ignore")
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as e:
        raise AudioError(f"this is not an audio file that can be read ({_why(e)})") from None
    with container:
        if not container.streams.audio:
            raise AudioError("the file has no audio track")
        stream = container.streams.audio[0]
        declared = _declared_seconds(container, stream)
        if declared is not None and declared > max_seconds + 1:
            raise AudioError(f"the audio is {clock(declared)} long; the most taken is {clock(max_seconds)}")
        samples = _decode(av, container, stream, rate, max_seconds)
    if len(samples) == 0:
        raise AudioError("the audio file holds no sound (no samples could be decoded)")
    return Sound(samples, rate)


def _why(e: BaseException) -> str:
    """FFmpeg's own reason ("Invalid data found when processing input"), without its errno and file name."""
    msg = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return msg[:1].lower() + msg[1:]


def _declared_seconds(container, stream) -> float | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / 1_000_000  # av.time_base
    return None


def _decode(av, container, stream, rate: int, max_seconds: float) -> np.ndarray:
    resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
    parts: list[np.ndarray] = []
    total, limit = 0, int(max_seconds * rate)
    try:
        for frame in container.decode(stream):
            for out in resampler.resample(frame):
                parts.append(out.to_ndarray().reshape(-1))
                total += parts[-1].size
            if total > limit:
                raise AudioError(f"the audio is longer than {clock(max_seconds)}, the most taken")
        for out in resampler.resample(None):
            parts.append(out.to_ndarray().reshape(-1))
    except av.error.FFmpegError as e:
        if not parts:
            raise AudioError(f"the audio cannot be decoded ({_why(e)})") from None
        # a cut-off file: what decoded before the damage is kept, as players do
    if not parts:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(parts).astype(np.float32) / 32768.0


def encode_audio(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    """int16 or float32 mono ``samples`` at ``rate`` as a file in ``fmt`` (one of FORMATS)."""
    if samples.dtype != np.int16:
        samples = (np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16)
    if fmt == "wav":
        out = io.BytesIO()
        with wave.open(out, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes(samples.astype("<i2").tobytes())
        return out.getvalue()
    if fmt == "pcm":
        return resample16(samples, rate, PCM_RATE).astype("<i2").tobytes()
    if fmt not in _CONTAINERS:
        raise AudioError(f"unknown audio format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return _encode_av(samples, rate, fmt)


def resample16(samples: np.ndarray, rate: int, to: int) -> np.ndarray:
    """int16 mono samples from ``rate`` to ``to`` Hz (PyAV's resampler, as decoding uses)."""
    if rate == to:
        return samples
    import av

    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="s16", layout="mono", rate=to)
    parts = [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
    parts += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


def _encode_av(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    import av

    container_name, codec = _CONTAINERS[fmt]
    if fmt == "opus":
        samples, rate = resample16(samples, rate, _OPUS_RATE), _OPUS_RATE
    out = io.BytesIO()
    with av.open(out, mode="w", format=container_name) as container:
        stream: Any = container.add_stream(codec, rate=rate, layout="mono")  # an AudioStream for these codecs
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()

"""Speech to text: a faster-whisper transcriber, and live dictation cut at the speaker's pauses.

:class:`Dictation` takes audio as it is recorded (the microphone's chunks, or a
file's in the tests: the same path) and runs faster-whisper's Silero voice
activity detector over what has not been transcribed yet. When speech is
followed by a pause, that stretch is transcribed at once, so long dictation
appears segment by segment while the user still speaks, and when recording
stops only the last stretch is left to transcribe. Silence is dropped as it
comes, so memory stays small however long the microphone is open.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import numpy as np

from .audio import SAMPLE_RATE
from .models import SpeechModel

PAUSE_S = 0.6          # a pause this long after speech ends a segment
CHECK_EVERY_S = 0.3    # how much new audio is gathered before the detector looks again
MAX_SEGMENT_S = 25.0   # a segment is cut here even without a pause (Whisper sees 30 s at a time)
PAD_S = 0.2            # audio kept either side of detected speech (the detector cuts close)


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str
    seconds: float                      # the audio's length
    segments: list[tuple[float, float, str]] = field(default_factory=list)  # (start s, end s, text)


class Transcriber:
    """A Whisper model, loaded once; safe to call from several threads (one at a time)."""

    def __init__(self, model: SpeechModel, *, threads: int = 0) -> None:
        from faster_whisper import WhisperModel

        self.model = model
        # int8 on a CPU: CTranslate2's fastest, within a word of float32 on Whisper tiny
        self._whisper = WhisperModel(str(model.path), device="cpu", compute_type="int8", cpu_threads=threads)
        self.multilingual = bool(self._whisper.model.is_multilingual)
        self._lock = threading.Lock()

    def transcribe(self, samples: np.ndarray, *, language: str | None = None, prompt: str | None = None,
                   vad: bool = True, temperature: float = 0.0, chinese: str | None = None) -> Transcript:
        """The words in ``samples`` (mono float32, 16 kHz). ``language`` None: detected (per
        segment on a multilingual model, so mixed Chinese and English each keep their own).
        ``chinese``: "simplified" or "traditional", the script Chinese is written in (Whisper writes
        either, from one sentence to the next); None leaves Whisper's."""
        lang = None if language in (None, "", "auto") else language
        if not self.multilingual:
            lang = "en"
        with self._lock:
            segments, info = self._whisper.transcribe(
                samples.astype(np.float32, copy=False), language=lang, beam_size=5, temperature=temperature,
                initial_prompt=prompt or None, vad_filter=vad, condition_on_previous_text=False,
                multilingual=self.multilingual and lang is None)
            parts = [(s.start, s.end, s.text.strip()) for s in segments]
        if chinese and info.language == "zh":
            parts = [(a, b, chinese_script(t, chinese)) for a, b, t in parts]
        return Transcript(_join([p[2] for p in parts]), info.language, len(samples) / SAMPLE_RATE, parts)


CHINESE_SCRIPTS = {"simplified": "t2s", "traditional": "s2t"}  # OpenCC's conversions


def chinese_script(text: str, script: str) -> str:
    """``text`` written in Chinese's ``script`` ("simplified" or "traditional"), by OpenCC's tables
    (phrases first, then characters): 會議時開會 -> 会议时开会."""
    return _converter(CHINESE_SCRIPTS[script]).convert(text)


@functools.lru_cache(maxsize=2)
def _converter(conversion: str):
    from opencc import OpenCC

    return OpenCC(conversion)  # reads its tables (~30 ms): once


def _join(texts: list[str]) -> str:
    """Segments joined as people write them: a space between words, none between Chinese characters."""
    out = ""
    for t in (t for t in texts if t):
        out += t if not out or _cjk(out[-1]) or _cjk(t[0]) else " " + t
    return out


def _cjk(ch: str) -> bool:
    return "\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef"


class Dictation:
    """Recorded audio in, as it comes; text out, a segment at a time."""

    def __init__(self, transcriber: Transcriber, *, language: str | None = None, pause_s: float = PAUSE_S,
                 chinese: str | None = None) -> None:
        """``language`` None: each stretch's own is detected (mixed Chinese and English keep theirs).
        ``chinese``: the script Chinese is written in (see :meth:`Transcriber.transcribe`)."""
        from faster_whisper.vad import VadOptions, get_speech_timestamps

        self.transcriber = transcriber
        self.language, self.chinese = language, chinese
        self.pause = int(pause_s * SAMPLE_RATE)
        self._vad = get_speech_timestamps
        self._options = VadOptions(min_silence_duration_ms=int(pause_s * 500), speech_pad_ms=0)
        self._pending = np.zeros(0, dtype=np.float32)
        self._unchecked = 0
        self.heard_speech = False       # any speech at all (the window says "heard nothing" otherwise)
        self.texts: list[str] = []      # every segment's text so far
        self.languages: list[str] = []  # each one's language (detected, or the one given)

    def feed(self, samples: np.ndarray) -> list[str]:
        """Add recorded samples (mono float32, 16 kHz); the texts of segments they completed."""
        self._pending = np.concatenate([self._pending, samples.astype(np.float32, copy=False)])
        self._unchecked += len(samples)
        if self._unchecked < CHECK_EVERY_S * SAMPLE_RATE:
            return []
        self._unchecked = 0
        return self._cut(final=False)

    def finish(self) -> list[str]:
        """Recording stopped: the last segment's text (if it held speech)."""
        return self._cut(final=True)

    @property
    def text(self) -> str:
        return _join(self.texts)

    def _cut(self, *, final: bool) -> list[str]:
        speech = self._vad(self._pending, self._options) if len(self._pending) else []
        if not speech:
            if not final:  # silence so far: keep only a little, in case speech starts at its end
                self._pending = self._pending[-int(PAD_S * SAMPLE_RATE):]
            else:
                self._pending = self._pending[:0]
            return []
        self.heard_speech = True
        end = speech[-1]["end"]
        long = len(self._pending) >= MAX_SEGMENT_S * SAMPLE_RATE
        if not final and not long and len(self._pending) - end < self.pause:
            return []  # still speaking, or not paused long enough yet
        pad = int(PAD_S * SAMPLE_RATE)
        cut = len(self._pending) if final or long else min(len(self._pending), end + pad)
        segment = self._pending[max(0, speech[0]["start"] - pad):cut]
        self._pending = self._pending[cut:]
        heard = self.transcriber.transcribe(segment, language=self.language, vad=False, chinese=self.chinese)
        if heard.text:
            self.texts.append(heard.text)
            self.languages.append(heard.language)
        return [heard.text] if heard.text else []

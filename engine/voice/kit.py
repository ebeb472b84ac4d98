"""The speech models one process uses, each loaded on first use and kept: the window and the server share them."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .listen import Transcriber
from .models import BUNDLED, piper_voice, whisper_model
from .speak import Voice

if TYPE_CHECKING:
    from ..models.hub import ProgressFn


@dataclass(frozen=True)
class VoiceChoice:
    """Which models a kit loads, and how: None or "bundled" for the bundled ones, else a path or a Hub id.
    (The language heard and the voice's speed are per call: changing them loads nothing.)"""
    whisper: str | None = None
    piper: str | None = None
    threads: int = 0              # 0: the libraries' own choice (all cores)
    variation: bool = True        # Piper's sampled pitch and timing (False: the same text, the same samples)

    def same_models(self, other: "VoiceChoice") -> bool:
        """Whether ``other`` names the same two models (None and "bundled" are the same)."""
        return (self.whisper or BUNDLED, self.piper or BUNDLED) == (other.whisper or BUNDLED, other.piper or BUNDLED)


class VoiceKit:
    """A transcriber and a voice, loaded when first asked for (off the GUI thread: loading takes ~0.5 s each)."""

    def __init__(self, choice: VoiceChoice | None = None) -> None:
        self.choice = choice or VoiceChoice()
        self._lock = threading.Lock()
        self._transcriber: Transcriber | None = None
        self._voice: Voice | None = None

    def transcriber(self, *, progress: ProgressFn | None = None, cancel: threading.Event | None = None) -> Transcriber:
        """The Whisper model, loaded now if it is not yet (a Hub model is downloaded first, if it is not in
        the cache: ``progress`` hears of its bytes and ``cancel`` stops it, keeping what came)."""
        with self._lock:
            if self._transcriber is None:
                model = whisper_model(self.choice.whisper, progress=progress, cancel=cancel)
                self._transcriber = Transcriber(model, threads=self.choice.threads)
            return self._transcriber

    def voice(self, *, progress: ProgressFn | None = None, cancel: threading.Event | None = None) -> Voice:
        """The Piper voice, loaded now if it is not yet (as :meth:`transcriber` says)."""
        with self._lock:
            if self._voice is None:
                model = piper_voice(self.choice.piper, progress=progress, cancel=cancel)
                self._voice = Voice(model, threads=self.choice.threads, variation=self.choice.variation)
            return self._voice

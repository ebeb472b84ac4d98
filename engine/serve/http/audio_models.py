"""Which speech model an audio request asks for: ``model`` names one of the speech models installed here
(as the chat API's ``model`` names a language model), and OpenAI's own names (``whisper-1``, ``tts-1``, ...)
mean the ones chosen in Settings → Voice (or the bundled ones).

A ``language`` the chosen Whisper cannot hear (an English-only model asked for Chinese, which it would write
as digits) is a 400 that names an installed model that can, or says how to get one. Another model than the
chosen ones is loaded on first use and kept (a few at most), as the chosen ones are.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable

from ...voice.kit import VoiceChoice, VoiceKit
from ...voice.listen import Transcriber
from ...voice.models import SpeechModel
from ...voice.on_disk import find_speech_model, speech_id, speech_models_on_disk
from ...voice.speak import Voice
from ..protocols.errors import ApiError

TRANSCRIBE_ALIASES = ("", "whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")
SPEAK_ALIASES = ("", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
LIST_TTL_S = 10.0   # the installed list is read from disk (the Hugging Face cache) at most this often
MAX_OTHER_KITS = 3  # speech models besides the chosen ones kept loaded
FETCH_HINT = "python -m engine models fetch-whisper-base"
MULTILINGUAL = "99 languages, detected"


class SpeechModels:
    """The speech models an audio request may name, and the loaded ones (the chosen ones are ``kit()``'s)."""

    def __init__(self, kit: Callable[[], VoiceKit]) -> None:
        self._kit = kit
        self._lock = threading.Lock()
        self._listed: tuple[float, list[SpeechModel]] = (0.0, [])
        self._others: OrderedDict[str, VoiceKit] = OrderedDict()

    def installed(self) -> list[SpeechModel]:
        """The speech models on this machine (read again after LIST_TTL_S)."""
        with self._lock:
            at, models = self._listed
        if time.monotonic() - at > LIST_TTL_S:
            choice = self._kit().choice
            models = speech_models_on_disk(chosen=[c for c in (choice.whisper, choice.piper) if c])
            with self._lock:
                self._listed = (time.monotonic(), models)
        return models

    def _named(self, kind: str, name: str) -> VoiceKit:
        """A kit holding the installed ``kind`` model called ``name``: 404 (naming the installed ones) if none."""
        found = find_speech_model(self.installed(), kind, name)
        if found is None:
            listed = [m for m in self.installed() if m.kind == kind]
            which = ", ".join(f"{speech_id(m)} ({m.languages})" for m in listed) or "none"
            alias = "whisper-1" if kind == "whisper" else "tts-1"
            raise ApiError(404, f"no {'Whisper' if kind == 'whisper' else 'Piper voice'} called {name!r} is installed "
                                f"here; installed: {which}; {alias} means the one chosen in Settings → Voice",
                           param="model", code="model_not_found")
        chosen = self._kit().choice
        with self._lock:
            kit = self._others.pop(found.spec, None)
            if kit is None:
                kit = VoiceKit(VoiceChoice(whisper=found.spec if kind == "whisper" else chosen.whisper,
                                           piper=found.spec if kind == "piper" else chosen.piper,
                                           threads=chosen.threads, variation=chosen.variation))
            self._others[found.spec] = kit
            while len(self._others) > MAX_OTHER_KITS:
                self._others.popitem(last=False)
        return kit

    def transcriber(self, name: str, language: str | None) -> Transcriber:
        """The Whisper ``name`` names (loaded now if it is not), checked to hear ``language``."""
        kit = self._kit() if name in TRANSCRIBE_ALIASES else self._named("whisper", name)
        t = kit.transcriber()
        lang = (language or "").split("-")[0].lower()
        if lang and lang not in ("en", "auto") and not t.multilingual:
            able = [m for m in self.installed() if m.kind == "whisper" and m.languages == MULTILINGUAL]
            fix = (f"{speech_id(able[0])} is installed and can: send model={speech_id(able[0])}" if able else
                   f"none that can is installed here; `{FETCH_HINT}` fetches one")
            raise ApiError(400, f"the speech model {t.model.name} hears English only, so it cannot transcribe "
                                f"language {language!r}; {fix}", param="language", code="unsupported_language")
        return t

    def voice(self, name: str) -> Voice:
        """The Piper voice ``name`` names (loaded now if it is not)."""
        kit = self._kit() if name in SPEAK_ALIASES else self._named("piper", name)
        return kit.voice()

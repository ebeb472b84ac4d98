"""Voice: dictation (faster-whisper) and read-aloud (Piper), offline, for the window and the server.

An optional install (``python3 scripts/setup.py --voice``): without it nothing here
imports either library, :func:`voice_installed` is False, the window shows no voice
buttons and the server's audio routes answer that voice is not installed.
- audio.py: reading audio (any container PyAV opens, with limits) and writing it (WAV, PCM, MP3...);
- models.py: which speech models are here (the bundled packages, a folder, a Hub download);
- listen.py: a transcriber and live dictation, cut at the speaker's pauses by a voice-activity detector;
- speak.py: a Piper voice, and the reply text turned into speakable sentences as it streams;
- words.py: word error rate, for the benchmark and the tests.

This package is public: the app uses the names below (docs/layout.md, "The engine's face"), each
imported from its module when first asked, so a window without voice never loads faster-whisper.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:
    from .audio import SAMPLE_RATE, level_dbfs, pcm16_to_float
    from .kit import VoiceChoice, VoiceKit
    from .listen import Dictation
    from .models import BUNDLED, SETUP_HINT, SpeechModel, on_hub, piper_voice, voice_installed, whisper_model
    from .on_disk import delete_speech_model, speech_fit, speech_models_on_disk
    from .sentences import SentenceCutter

_WHERE = {
    **dict.fromkeys(["SAMPLE_RATE", "level_dbfs", "pcm16_to_float"], ".audio"),
    "VoiceChoice": ".kit", "VoiceKit": ".kit", "Dictation": ".listen",
    **dict.fromkeys(["BUNDLED", "SETUP_HINT", "SpeechModel", "on_hub", "piper_voice", "voice_installed",
                    "whisper_model"], ".models"),
    **dict.fromkeys(["delete_speech_model", "speech_fit", "speech_models_on_disk"], ".on_disk"),
    "SentenceCutter": ".sentences",
}
__all__ = ["BUNDLED", "Dictation", "SAMPLE_RATE", "SETUP_HINT", "SentenceCutter", "SpeechModel", "VoiceChoice",
           "VoiceKit", "delete_speech_model", "level_dbfs", "on_hub", "pcm16_to_float", "piper_voice", "speech_fit",
           "speech_models_on_disk", "voice_installed", "whisper_model"]
__getattr__ = lazy_exports(__name__, _WHERE)

"""Voice: dictation (faster-whisper) and read-aloud (Piper), offline, for the window and the server.

An optional install (``python3 scripts/setup.py --voice``): without it nothing here
imports either library, :func:`voice_installed` is False, the window shows no voice
buttons and the server's audio routes answer that voice is not installed.
- audio.py: reading audio (any container PyAV opens, with limits) and writing it (WAV, PCM, MP3...);
- models.py: which speech models are here (the bundled packages, a folder, a Hub download);
- listen.py: a transcriber and live dictation, cut at the speaker's pauses by a voice-activity detector;
- speak.py: a Piper voice, and the reply text turned into speakable sentences as it streams;
- words.py: word error rate, for the benchmark and the tests.
"""
from __future__ import annotations

from importlib.util import find_spec


def voice_installed() -> bool:
    """Whether the optional voice libraries are installed (without importing them)."""
    return find_spec("faster_whisper") is not None and find_spec("piper") is not None

"""Speech for the voice tests: sentences said by espeak-ng (Debian's; scripts/test.sh installs it) and
by Piper, read back through the same decoder the server and the window use."""
from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.voice.audio import SAMPLE_RATE, encode_audio, read_audio

SENTENCES = (  # each about 4-5 s as espeak-ng says it
    "The weather was cold and windy, so we stayed inside and read books all afternoon.",
    "Can you explain how a prefix cache makes the second question faster?",
    "What is the difference between a list and a tuple in Python?",
)


def espeak(text: str, folder: Path, *, voice: str = "en-us") -> np.ndarray:
    """``text`` said by espeak-ng, as 16 kHz float32 samples."""
    exe = shutil.which("espeak-ng")
    assert exe, "espeak-ng is not installed: scripts/test.sh installs it (apt-get install espeak-ng)"
    out = folder / f"espeak-{abs(hash((text, voice)))}.wav"
    subprocess.run([exe, "-v", voice, "-w", str(out), text], check=True, capture_output=True, timeout=60)
    return read_audio(out.read_bytes(), max_seconds=120).samples


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SAMPLE_RATE), dtype=np.float32)


def chunks(samples: np.ndarray, ms: int = 100):
    """``samples`` as a microphone gives them: ``ms`` at a time."""
    step = SAMPLE_RATE * ms // 1000
    for i in range(0, len(samples), step):
        yield samples[i:i + step]


@lru_cache(maxsize=1)
def two_hours() -> bytes:
    """A real two-hour recording (silence, FLAC at 8 kHz: 1.3 MB, under any upload limit)."""
    return encode_audio(np.zeros(2 * 3600 * 8000, dtype=np.int16), 8000, "flac")

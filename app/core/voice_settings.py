"""Settings → Voice: which speech models, the language heard, the voice's speed, and when Hearth speaks.

Kept as one object in the settings file (``voice``); Qt-free. The models are
"bundled" or a path (a faster-whisper folder, a Piper ``.onnx`` voice).
"""
from __future__ import annotations

from typing import Any

from engine.voice import VoiceChoice

# Whisper's language codes people pick most; "auto" detects (on a multilingual model).
LANGUAGES = {"auto": "Detect", "en": "English", "zh": "Chinese (Simplified)", "zh-Hant": "Chinese (Traditional)",
             "es": "Spanish", "fr": "French", "de": "German",
             "ja": "Japanese", "ko": "Korean", "ru": "Russian", "pt": "Portuguese", "it": "Italian", "ar": "Arabic",
             "hi": "Hindi", "nl": "Dutch"}
SPEEDS = (0.5, 3.0)


def default() -> dict[str, Any]:
    return {"whisper": "bundled", "piper": "bundled", "language": "auto", "speed": 1.0, "speak_replies": False,
            "hands_free": False}


def problem(v: Any) -> str | None:
    """The first invalid voice setting as "voice: rule", or None."""
    if not isinstance(v, dict) or set(v) != set(default()):
        return f"voice: must hold {', '.join(default())}"
    for key in ("whisper", "piper"):
        if not isinstance(v[key], str) or not v[key].strip():
            return f"voice: {key} must be bundled or a model's path"
    if v["language"] not in LANGUAGES:
        return f"voice: language must be one of {', '.join(LANGUAGES)}, got {v['language']!r}"
    speed = v["speed"]
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not SPEEDS[0] <= speed <= SPEEDS[1]:
        return f"voice: speed must be a number from {SPEEDS[0]} to {SPEEDS[1]}, got {speed!r}"
    for key in ("speak_replies", "hands_free"):
        if not isinstance(v[key], bool):
            return f"voice: {key} must be true or false"
    return None


def choice(v: dict[str, Any]) -> VoiceChoice:
    """What the engine's voice kit loads for these settings."""
    return VoiceChoice(whisper=v["whisper"], piper=v["piper"])


TRADITIONAL_LOCALES = ("zh_TW", "zh_HK", "zh_MO")


def language(v: dict[str, Any]) -> str | None:
    """The language dictation is heard in, as Whisper names it (None: detected)."""
    return None if v["language"] == "auto" else v["language"].split("-")[0]


def chinese_script(v: dict[str, Any], locale: str = "") -> str:
    """The script dictated Chinese is written in: the one chosen, else (Detect) the system's: Traditional
    where ``locale`` (Qt's name for the system's, e.g. "zh_TW") writes it, Simplified elsewhere."""
    if v["language"] in ("zh", "zh-Hant"):
        return "traditional" if v["language"] == "zh-Hant" else "simplified"
    return "traditional" if locale.startswith(TRADITIONAL_LOCALES) else "simplified"

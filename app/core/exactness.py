"""What the Exactness choice (exact / fast) means, in words for the Settings dialog. Qt-free."""
from __future__ import annotations

from engine import HearthError


def exactness_note(profile: str, llama: bool, measured: str = "") -> str:
    """What the chosen profile means for the output, said next to the choice, with
    the difference ``measured`` by the last saved benchmark of this model."""
    if not llama:
        return "A choice for GGUF files on llama.cpp."
    if profile == "fast":
        text = ("llama.cpp's own fast kernels (repack buffers, flash attention, tinyBLAS), as llama.cpp, LM Studio and "
                "Ollama run them: replies served from the prompt cache or sped up by a draft may differ "
                "slightly from plain decoding.")
    else:
        text = ("Cached and speculative replies are token for token what plain decoding gives, with "
                "slower kernels.")
    return f"{text} {measured}".strip()


def measured_difference(source: str, model: str) -> str:
    """The exact-vs-fast figures of this GGUF's last saved benchmark run, or how to get them."""
    from engine.library import resolve
    from engine.tuning import profile_difference

    if source not in ("bundled", "gguf"):
        return ""
    try:
        path = str(resolve(None if source == "bundled" else model).path)
    except HearthError:
        return ""
    return profile_difference(path) or "Not measured yet: Performance → Benchmark this model… measures both."

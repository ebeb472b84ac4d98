"""Hearth's inference engine. Never imports Qt; torch only for the transformers backend.

Public API::

    from engine import Engine, Message, SamplingParams
    eng = Engine.load()                      # the bundled model
    for ev in eng.stream([Message("user", "Hi")], SamplingParams(temperature=0)):
        ...                                  # ev.kind == "delta" (answer text) | "reasoning" | "tool_call" | "final"
"""
from .engine import Engine
from .errors import HearthError, ModelFileError, ModelLoadError, PromptTooLongError, UnsupportedModelError
from .metrics import GenerationStats
from .types import Message, SamplingParams, StreamEvent

__all__ = ["Engine", "GenerationStats", "HearthError", "Message", "ModelFileError", "ModelLoadError",
           "PromptTooLongError", "SamplingParams", "StreamEvent", "UnsupportedModelError"]

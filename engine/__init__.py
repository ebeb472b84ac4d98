"""Hearth's inference engine. Never imports Qt; torch only for the transformers backend.

Public API::

    from engine import Engine, EngineConfig, Message, SamplingParams
    eng = Engine.open(EngineConfig())        # the bundled model
    for ev in eng.stream([Message("user", "Hi")], SamplingParams(temperature=0)):
        ...                                  # ev.kind == "delta" (answer text) | "reasoning" | "tool_call" | "final"
"""
from .config import EngineConfig
from .decode.metrics import GenerationStats
from .engine import Engine
from .errors import HearthError, ModelFileError, ModelLoadError, PromptTooLongError, UnsupportedModelError
from .prompt.messages import Message
from .types import SamplingParams, StreamEvent

__all__ = ["Engine", "EngineConfig", "GenerationStats", "HearthError", "Message", "ModelFileError", "ModelLoadError",
           "PromptTooLongError", "SamplingParams", "StreamEvent", "UnsupportedModelError"]

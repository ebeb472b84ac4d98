"""Hearth's inference engine. Never imports Qt; torch only for the transformers backend.

Public API::

    from engine import Engine, EngineConfig, Message, SamplingParams
    eng = Engine.open(EngineConfig())        # the bundled model
    for ev in eng.stream([Message("user", "Hi")], SamplingParams(temperature=0)):
        ...                                  # ev.kind == "delta" (answer text) | "reasoning" | "tool_call" | "final"

This module is public: with the public packages named in docs/layout.md ("The engine's face": library,
loading, sizing, prompt, inputs, reply_formats, remote, workers, voice, serve, tuning) it is all the app
imports of the engine (tests/test_layout.py). Here: the engine, its interface (ChatEngine, ModelInfo with
LocalDetails, Capabilities; plan_tools and count_image_tokens, which ask a capability), its config, types,
errors, a reply's record (GenerationStats), atomic writes and the data folders.
"""
from typing import TYPE_CHECKING

from .atomic import atomic_write, move_aside
from .backends.openmp import release as release_openmp
from .config import EXACTNESS, EngineConfig, default_exactness
from .decode.metrics import GenerationStats, from_server, has_timeline, is_complete, openai_finish_reason
from .engine import Engine
from .errors import (Cancelled, HearthError, ModelFileError, ModelLoadError, PromptTooLongError, ToolsUnsupported,
                     UnsupportedModelError)
from .exports import lazy_exports
from .interface import Capabilities, ChatEngine, LocalDetails, ModelInfo, count_image_tokens, plan_tools
from .prompt.messages import Message
from .types import SamplingParams, StreamEvent

if TYPE_CHECKING:
    from .paths import config_dir, data_dir

__all__ = ["EXACTNESS", "Cancelled", "Capabilities", "ChatEngine", "Engine", "EngineConfig", "GenerationStats",
           "HearthError", "LocalDetails", "Message", "ModelFileError", "ModelInfo", "ModelLoadError",
           "PromptTooLongError", "SamplingParams", "StreamEvent", "ToolsUnsupported", "UnsupportedModelError",
           "atomic_write", "config_dir", "count_image_tokens", "data_dir", "default_exactness", "from_server",
           "has_timeline", "is_complete", "move_aside", "openai_finish_reason", "plan_tools", "release_openmp"]

# The data folders' module is not imported by the engine itself: it loads when first asked.
_WHERE = {"config_dir": ".paths", "data_dir": ".paths"}
__getattr__ = lazy_exports(__name__, _WHERE)

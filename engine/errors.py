"""Errors the user can hit. Each carries a one-line message meant for people.

The CLI prints ``str(err)`` and exits non-zero without a traceback; the window
shows the same text in a dialog or status line.
"""
from __future__ import annotations


class HearthError(Exception):
    """Base class for every expected, user-facing failure."""

    exit_code = 2


class ModelFileError(HearthError):
    """The model file is missing, unreadable, not GGUF, truncated or corrupt."""


class UnsupportedModelError(HearthError):
    """The file is valid but describes a model this build cannot run."""


class ModelLoadError(HearthError):
    """The backend failed to load a model (out of memory, bad tensors...)."""


class PromptTooLongError(HearthError):
    """The rendered prompt does not fit in the context window."""


class TemplateError(HearthError):
    """The model's chat template failed to render or tried something unsafe."""


class ContextFullError(HearthError):
    """The KV cache has no room for the tokens being added (a backend-level
    guard; the decode loop stops with finish reason ``context_full`` first)."""


class Cancelled(HearthError):
    """Stop was pressed while a long computation (a prompt's prefill) ran; the
    KV holds only what was complete before it."""


class NoVisionError(HearthError):
    """A message holds an image and the loaded model has no vision projector."""


class GrammarError(HearthError):
    """A grammar that cannot be used (bad syntax, or a backend without grammars)."""


class NoGrammar(GrammarError):
    """This backend has no grammars: a tool call is then parsed and validated, not constrained."""


class ToolsUnsupported(HearthError):
    """The model cannot call tools (its chat template takes none Hearth can parse)."""

"""What a request may hand the chat template: ``chat_template_kwargs`` and ``reasoning_effort``.

Chat templates are untrusted code running in the sandbox (engine/chat_template.py).
The variables a client gives them are checked here before any rendering: an
object of JSON values, small and shallow, whose names are plain identifiers and
never one of the variables the renderer sets itself or a sandbox global. A
client could otherwise hand a template a conversation, tools or tokens the
server never checked (``messages``, ``tools``, ``bos_token``), or shadow the
helpers a template calls (``raise_exception``, ``namespace``).

No HTTP here: a bad value raises :class:`TemplateVarsError` naming the field,
which openai_schema turns into a 400.
"""
from __future__ import annotations

import json
from typing import Any

from ...reply_formats import ThinkControl

REASONING_EFFORTS = ("low", "medium", "high")
# A few switches in practice (enable_thinking, thinking_budget, a date); the bounds only stop abuse.
MAX_VARIABLES = 32
MAX_BYTES = 16 << 10  # the object as JSON
MAX_DEPTH = 8
MAX_NAME = 64
RESERVED = frozenset({
    # set by ChatTemplate.render for every template
    "messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token",
    # the sandbox's globals (jinja2's defaults and Hearth's helpers)
    "raise_exception", "strftime_now", "range", "dict", "lipsum", "cycler", "joiner", "namespace",
    # apply_chat_template's own arguments, and Llama 3's second door for tools
    "chat_template", "continue_final_message", "tokenize", "custom_tools"})


class TemplateVarsError(ValueError):
    """A value the template must not be given; ``param`` names the request field."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def reasoning_effort(value: Any) -> str | None:
    """``reasoning_effort``: None, or one of low, medium, high (gpt-oss's template reads it)."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in REASONING_EFFORTS:
        raise TemplateVarsError("reasoning_effort", f"reasoning_effort must be one of "
                                                    f"{', '.join(REASONING_EFFORTS)}, got {short(value)}")
    return value


def depth(value: Any, limit: int) -> int:
    """How deep ``value`` nests (a scalar is 0); stops counting past ``limit``. No recursion:
    a hostile value cannot exhaust the stack."""
    stack, deepest = [(value, 0)], 0
    while stack and deepest <= limit:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def short(value: Any, limit: int = 60) -> str:
    """``value``'s repr, cut to ``limit`` characters: what an error message may echo."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def chat_template_kwargs(value: Any) -> dict[str, Any] | None:
    """``chat_template_kwargs`` as the template will get it, or None when not given."""
    param = "chat_template_kwargs"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TemplateVarsError(param, f"chat_template_kwargs must be an object of template variables, "
                                       f"got {type(value).__name__}")
    if len(value) > MAX_VARIABLES:
        raise TemplateVarsError(param, f"chat_template_kwargs takes at most {MAX_VARIABLES} variables, "
                                       f"got {len(value)}")
    for key in value:
        if not isinstance(key, str) or not key.isidentifier() or not key.isascii() or len(key) > MAX_NAME:
            raise TemplateVarsError(param, f"chat_template_kwargs: {short(key)} is not a template variable "
                                           f"name (ASCII letters, digits and _, at most {MAX_NAME} characters)")
        if key in RESERVED or key.startswith("_"):
            raise TemplateVarsError(param, f"chat_template_kwargs: {key!r} is set by the server and cannot "
                                           "be given here")
    if depth(value, MAX_DEPTH) > MAX_DEPTH:
        raise TemplateVarsError(param, f"chat_template_kwargs nests deeper than {MAX_DEPTH} levels")
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode())
    except (TypeError, ValueError):  # NaN/Infinity (json.loads accepts them), or not JSON at all
        raise TemplateVarsError(param, "chat_template_kwargs must hold only JSON values "
                                       "(no NaN or Infinity)") from None
    if size > MAX_BYTES:
        raise TemplateVarsError(param, f"chat_template_kwargs is {size:,} bytes as JSON; at most "
                                       f"{MAX_BYTES:,} are taken")
    return dict(value)


def check_think(think: ThinkControl | None, kwargs: dict[str, Any] | None) -> None:
    """The model's own Think switch, when the request sets it, holds one of its values
    (``enable_thinking`` must be true or false: a string "false" would read as true)."""
    if think is None or not kwargs or think.kind in ("flag", "effort") or think.variable not in kwargs:
        return
    value = kwargs[think.variable]
    try:
        think.kwargs(value)
    except ValueError:
        kind = "true or false" if think.kind == "switch" else "a whole number (-1: unlimited, 0: off)"
        raise TemplateVarsError("chat_template_kwargs", f"chat_template_kwargs: this model's template reads "
                                                        f"{think.variable} as {kind}, got {short(value)}") from None

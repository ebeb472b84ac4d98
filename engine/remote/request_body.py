"""A request body's parts as OpenAI's chat API takes them: the messages (images as data URLs, calls
with JSON-text arguments) and the sampling fields, with notes on what a server may not honour."""
from __future__ import annotations

import base64
from typing import Any, Mapping

from ..errors import HearthError
from ..prompt.messages import DocumentPart, ImagePart, Message, TextPart
from ..types import SamplingParams


def wire_message(m: Message | Mapping[str, Any]) -> dict[str, Any]:
    """A message as OpenAI's chat API takes it: images as data URLs, calls with JSON-text arguments.
    A document must have been turned into text by the caller (the window does, in the same slot as
    for a local model); one that reaches here is refused, never dropped silently."""
    msg = m if isinstance(m, Message) else Message.from_dict(m)
    out: dict[str, Any] = {"role": msg.role}
    if msg.only_text:
        out["content"] = msg.content
    else:
        parts: list[dict[str, Any]] = []
        for p in msg.parts:
            if isinstance(p, TextPart):
                parts.append({"type": "text", "text": p.text})
            elif isinstance(p, ImagePart):
                if p.data is None:
                    raise HearthError("an image's bytes are not at hand, so it cannot be sent to the server")
                url = f"data:{p.mime};base64,{base64.b64encode(p.data).decode()}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
            elif isinstance(p, DocumentPart):
                raise HearthError(f"the document {p.name!r} must be sent as its text")
        out["content"] = parts
    if msg.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in msg.tool_calls]
        if not msg.content:
            out["content"] = None
    if msg.tool_call_id is not None:
        out["tool_call_id"] = msg.tool_call_id
    return out


def sampling_fields(params: SamplingParams, extras: bool, *, budget: bool = False) -> tuple[dict[str, Any], list[str]]:
    """``params`` as request fields, and notes on what the server may not honour. ``extras``: send
    llama.cpp's and vLLM's own fields (top_k, min_p, repeat_penalty), which OpenAI itself refuses.
    ``budget``: the server closes a thinking block at ``reasoning_budget_tokens`` (a Hearth does)."""
    f: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p}
    if params.max_tokens is not None:  # none: the server's own default, until the model stops (as here)
        f["max_tokens"] = params.max_tokens
    notes: list[str] = []
    if params.stop:
        f["stop"] = list(params.stop)[:4]  # OpenAI's limit; llama.cpp and vLLM take more, but all take 4
        if len(params.stop) > 4:
            notes.append(f"only the first 4 of {len(params.stop)} stop strings were sent (OpenAI's limit)")
    if params.seed is not None:
        f["seed"] = params.seed
    if params.presence_penalty:
        f["presence_penalty"] = params.presence_penalty
    if params.frequency_penalty:
        f["frequency_penalty"] = params.frequency_penalty
    changed = [n for n, v, off in (("top_k", params.top_k, 0), ("min_p", params.min_p, 0.0),
                                   ("repeat_penalty", params.repeat_penalty, 1.0)) if v != off]
    if extras:
        f["top_k"], f["min_p"] = params.top_k, params.min_p
        if params.repeat_penalty != 1.0:
            f["repeat_penalty"] = f["repetition_penalty"] = params.repeat_penalty
    elif changed:
        notes.append(f"{', '.join(changed)} not sent: this server takes OpenAI's fields only")
    if params.grammar and extras:
        f["grammar"] = params.grammar  # llama-server's and llama-cpp-python's field (GBNF)
    elif params.grammar:
        notes.append("the grammar was not sent: this server takes OpenAI's fields only")
    if params.reasoning_budget is not None and budget:
        f["reasoning_budget_tokens"] = params.reasoning_budget
    elif params.reasoning_budget is not None:
        notes.append("the thinking budget was not sent: only a Hearth server is known to take it")
    return f, notes

"""The Responses API's input items, read into Hearth's messages, and its function-call items.

``input`` is a string or a list of items: ``message`` items (``{role, content}``, content a
string or ``input_text`` / ``output_text`` parts), ``function_call`` ``{call_id, name,
arguments}`` (an earlier call: it joins the assistant turn before it, or starts one),
``function_call_output`` ``{call_id, output}`` (its result: a ``tool`` message, as chat
templates take results) and ``reasoning`` items (their text becomes the reasoning of the
assistant turn that follows; opaque ``encrypted_content`` is skipped). A reply's calls are
``function_call`` output items whose ``call_id`` is the engine's id.
"""
from __future__ import annotations

import dataclasses
import uuid
from typing import Any, Callable

from ...prompt.messages import Message, Part, TextPart, ToolCall
from .errors import bad
from .images import image_part
from .template_vars import short

Rename = Callable[[str, Any], str]
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text", "text", "reasoning_text", "summary_text")


def text_of(content: Any, at: str) -> str:
    """A string, or text parts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(at, f"{at} must be a string or a list of input_text parts")
    out = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in TEXT_PARTS and isinstance(p.get("text"), str):
            out.append(p["text"])
        elif kind == "input_image":
            raise bad(f"{at}[{j}]", f"{at}[{j}]: an input_image belongs in a user message")
        elif kind in ("input_file", "input_audio"):
            raise bad(f"{at}[{j}]", f"{at}[{j}]: {kind} parts are not supported by this server: send text "
                                    "(and images in a user message)")
        else:
            raise bad(f"{at}[{j}]", f"{at}[{j}] must be an input_text part, got {short(kind if kind else p)}")
    return "".join(out)


def user_parts(content: Any, at: str) -> tuple[Part, ...]:
    """A user message's content as parts: its text, and ``input_image`` parts with a data: URL."""
    if not isinstance(content, list):
        return (TextPart(text_of(content, at)),)
    out: list[Part] = []
    for j, p in enumerate(content):
        if isinstance(p, dict) and p.get("type") == "input_image":
            out.append(image_part(p.get("image_url"), f"{at}[{j}].image_url"))
        else:
            out.append(TextPart(text_of([p], at)))
    return tuple(out)


def _text_field(item: dict, key: str, at: str) -> str:
    v = item.get(key)
    if not isinstance(v, str) or not v:
        raise bad(f"{at}.{key}", f"{at}.{key} must be text")
    return v


def _call(item: dict, at: str, rename: Rename) -> ToolCall:
    args = item.get("arguments", "{}")
    if not isinstance(args, str):
        raise bad(f"{at}.arguments", f"{at}.arguments must be JSON text")
    name = rename(_text_field(item, "name", at), item.get("namespace"))
    return ToolCall(_text_field(item, "call_id", at), name, args)


def _same(name: str, namespace: Any) -> str:
    return name


def read_input(v: Any, rename: Rename = _same) -> list[Message]:
    """``input`` as messages (a string is one user message); ``rename(name, namespace)``: an
    earlier call's name as the model was offered it (responses_tools.py)."""
    if isinstance(v, str):
        return [Message("user", v)]
    if not isinstance(v, list) or not v:
        raise bad("input", "input must be a string or a non-empty list of items")
    out: list[Message] = []
    thought: list[str] = []  # reasoning items waiting for the assistant turn they belong to
    for i, item in enumerate(v):
        at = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(at, f"{at} must be an item: a message ({{\"role\", \"content\"}}), function_call or "
                          "function_call_output")
        kind = item.get("type", "message")
        if kind == "reasoning":
            for key in ("content", "summary"):
                if item.get(key):
                    thought.append(text_of(item[key], f"{at}.{key}"))
                    break
        elif kind == "function_call":
            call = _call(item, at, rename)
            if out and out[-1].role == "assistant":
                out[-1] = dataclasses.replace(out[-1], tool_calls=(*out[-1].tool_calls, call))
            else:
                out.append(Message("assistant", reasoning="".join(thought) or None, tool_calls=(call,)))
                thought = []
        elif kind == "function_call_output":
            output = item.get("output")
            out.append(Message("tool", text_of(output if output is not None else "", f"{at}.output"),
                               tool_call_id=_text_field(item, "call_id", at)))
        elif kind == "message":
            role = ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
            if role is None:
                raise bad(f"{at}.role", f"{at}.role must be one of {', '.join(ROLES)}, "
                                        f"got {short(item.get('role'))}")
            reasoning = ("".join(thought) or None) if role == "assistant" else None
            thought = [] if role == "assistant" else thought
            if role == "user":
                out.append(Message(role, "", user_parts(item.get("content"), f"{at}.content")))
            else:
                out.append(Message(role, text_of(item.get("content"), f"{at}.content"), reasoning=reasoning))
        else:
            raise bad(at, f"{at}: {short(kind)} items are not supported by this server: send message, "
                          "function_call and function_call_output items")
    return out


def call_item(call: ToolCall, item_id: str, status: str = "completed", arguments: str | None = None,
              names: Callable[[str], tuple[str, str | None]] | None = None) -> dict:
    """A reply's call as a ``function_call`` output item; ``names``: the (name, namespace) the
    client gave the function the model called (responses_tools.py)."""
    name, namespace = names(call.name) if names else (call.name, None)
    item = {"type": "function_call", "id": item_id, "call_id": call.id, "name": name,
            "arguments": call.arguments if arguments is None else arguments, "status": status}
    if namespace is not None:
        item["namespace"] = namespace
    return item


def new_item_id() -> str:
    return f"fc_{uuid.uuid4().hex[:24]}"

"""Anthropic's content blocks and tools, read into Hearth's messages and Tools and written back.

A request's turns are ``{role, content}`` where content is a string or blocks: ``text``,
an assistant's ``thinking`` (its reasoning) and ``tool_use`` ``{id, name, input}`` (its
calls), and a user's ``tool_result`` ``{tool_use_id, content, is_error}``, each of which
becomes a ``tool`` message (as the chat templates take results), before the user's text.
A result marked ``is_error`` reaches the model with ``Error:`` before its text, since
templates have no field for it.

``tools`` are ``{name, description, input_schema}``; ``tool_choice`` is ``{type: auto |
any | tool | none, name, disable_parallel_tool_use}``, where ``any`` is OpenAI's
``required`` and ``tool`` names the one to call. A reply's calls are ``tool_use`` blocks
whose ids are the engine's (a family's template may demand its own form: Mistral's 9
letters and digits), with OpenAI's ``call_`` written as Anthropic's ``toolu_``.
"""
from __future__ import annotations

import json
from typing import Any

from ...reply_formats.tools import Tool, ToolError, check_tool
from ...prompt.messages import ImagePart, Message, Part, TextPart, ToolCall
from .errors import bad
from .images import image_part
from .openai_tools import offered
from .template_vars import short

SERVER_BLOCKS = ("server_tool_use", "web_search_tool_result", "mcp_tool_use", "mcp_tool_result",
                 "container_upload")
MEDIA_BLOCKS = ("image", "document", "search_result")
CHOICES = ("auto", "any", "tool", "none")


def _text(blocks: Any, at: str) -> str:
    """A tool result's content: a string or text blocks."""
    if blocks is None or isinstance(blocks, str):
        return blocks or ""
    if not isinstance(blocks, list):
        raise bad(at, f"{at} must be a string or a list of text blocks")
    out = []
    for j, b in enumerate(blocks):
        if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
            kind = b.get("type") if isinstance(b, dict) else b
            raise bad(f"{at}[{j}]", f"{at}[{j}] must be a text block; this server reads text results only, "
                                    f"got {short(kind)}")
        out.append(b["text"])
    return "".join(out)


def _tool_use(b: dict, at: str) -> ToolCall:
    cid, name, args = b.get("id"), b.get("name"), b.get("input", {})
    if not isinstance(cid, str) or not cid:
        raise bad(f"{at}.id", f"{at}.id must be the call's id (text)")
    if not isinstance(name, str) or not name:
        raise bad(f"{at}.name", f"{at}.name must be the tool's name")
    if not isinstance(args, dict):
        raise bad(f"{at}.input", f"{at}.input must be an object")
    return ToolCall(cid, name, json.dumps(args, ensure_ascii=False))


def _result(b: dict, at: str) -> Message:
    cid, err = b.get("tool_use_id"), b.get("is_error", False)
    if not isinstance(cid, str) or not cid:
        raise bad(f"{at}.tool_use_id", f"{at}.tool_use_id must be the id of the tool_use it answers")
    if not isinstance(err, bool):
        raise bad(f"{at}.is_error", f"{at}.is_error must be true or false")
    text = _text(b.get("content"), f"{at}.content")
    return Message("tool", f"Error: {text}" if err else text, tool_call_id=cid)


def turn(blocks: list, where: str, role: str) -> list[Message]:
    """One turn's blocks as messages: its tool results (a user's), then its text (with an
    assistant's reasoning and calls). ``role`` "system": text blocks only."""
    texts, thoughts, calls, results = [], [], [], []
    parts: list[Part] = []  # a user's text and images, in order
    for j, b in enumerate(blocks):
        at = f"{where}[{j}]"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            texts.append(b["text"])
            parts.append(TextPart(b["text"]))
        elif kind == "image" and role == "user":
            parts.append(_image(b, at))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            if kind == "thinking":  # redacted thinking is opaque data another server encrypted
                if not isinstance(b.get("thinking"), str):
                    raise bad(at, f"{at}.thinking must be text")
                thoughts.append(b["thinking"])
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(b, at))
        elif kind == "tool_result" and role == "user":
            results.append(_result(b, at))
        elif kind in ("tool_use", "tool_result"):
            raise bad(at, f"{at}: a {kind} block belongs in {'an assistant' if kind == 'tool_use' else 'a user'} "
                          f"turn, not a {role} one")
        elif kind in SERVER_BLOCKS:
            raise bad(at, f"{at}: {kind} blocks are not supported: this server runs no tools of its own")
        elif kind in MEDIA_BLOCKS:
            raise bad(at, f"{at}: {kind} blocks are not supported by this server: send text only")
        else:
            raise bad(at, f"{at} must be a text block ({{\"type\": \"text\", \"text\": ...}}), got "
                          f"{short(kind if kind is not None else b)}")
    text = "".join(texts)
    if role == "assistant":
        return [Message(role, text, reasoning="".join(thoughts) if thoughts else None, tool_calls=tuple(calls))]
    if any(isinstance(p, ImagePart) for p in parts):
        return [*results, Message(role, "", tuple(parts))]
    return [*results, Message(role, text)] if text or not results else results


def _image(b: dict, at: str) -> ImagePart:
    """An image block: its ``source`` base64 data (a URL is refused: this server fetches nothing)."""
    src = b.get("source")
    if not isinstance(src, dict):
        src = {}
    kind = src.get("type")
    if kind == "base64" and isinstance(src.get("data"), str) and isinstance(src.get("media_type"), str):
        return image_part(f"data:{src['media_type']};base64,{src['data']}", f"{at}.source")
    if kind in ("url", "file"):
        raise bad(f"{at}.source", f"{at}.source: this server fetches nothing from the network or a file store; "
                                  "send the image as base64 data")
    raise bad(f"{at}.source", f"{at}.source must be {{\"type\": \"base64\", \"media_type\", \"data\"}}")


def _tools(raw: Any) -> tuple[Tool, ...]:
    if not isinstance(raw, list) or not raw:
        raise ToolError("tools must be a non-empty list of {name, description, input_schema}")
    out = []
    for i, t in enumerate(raw):
        at = f"tools[{i}]"
        if not isinstance(t, dict):
            raise ToolError(f"{at} must be an object: {{name, description, input_schema}}", at)
        if t.get("type") not in (None, "custom"):
            raise ToolError(f"{at}: {short(t.get('type'))} is one of Anthropic's own server tools, which this "
                            "server does not run; give client tools ({name, description, input_schema})",
                            f"{at}.type")
        if not isinstance(t.get("input_schema"), dict):
            raise ToolError(f"{at}.input_schema is required: the JSON Schema of the tool's input",
                            f"{at}.input_schema")
        out.append(check_tool(t, at, "input_schema"))
    return tuple(out)


def parse_anthropic_tools(body: dict) -> tuple[tuple[Tool, ...], str, bool]:
    """``tools`` and ``tool_choice``: the tools offered, the choice ("auto", "required" or a
    name) and whether several calls may come."""
    raw, tc = body.get("tools"), body.get("tool_choice")
    choice, parallel = None, True
    if tc is not None:
        kind = tc.get("type") if isinstance(tc, dict) else None
        if kind not in CHOICES:
            raise bad("tool_choice", "tool_choice must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}, "
                                     f"got {short(tc)}")
        assert isinstance(tc, dict)
        if kind == "tool" and not isinstance(tc.get("name"), str):
            raise bad("tool_choice.name", "tool_choice {\"type\": \"tool\"} needs the name of the tool to call")
        dp = tc.get("disable_parallel_tool_use", False)
        if not isinstance(dp, bool):
            raise bad("tool_choice.disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use must be "
                                                               "true or false")
        choice = {"auto": "auto", "any": "required", "none": "none"}.get(kind, tc.get("name"))
        parallel = not dp
    return offered(raw, choice, parallel, lambda: _tools(raw))


def block_id(call: ToolCall) -> str:
    """A call's id on Anthropic's wire: the engine's, with OpenAI's ``call_`` as ``toolu_``."""
    return "toolu_" + call.id[5:] if call.id.startswith("call_") else call.id


def tool_use(call: ToolCall) -> dict[str, Any]:
    """A reply's call as a ``tool_use`` block."""
    value = call.arguments_value()
    return {"type": "tool_use", "id": block_id(call), "name": call.name,
            "input": value if isinstance(value, dict) else {}}

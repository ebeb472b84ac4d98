"""OpenAI function calling on the wire: ``tools``, ``tool_choice``, ``parallel_tool_calls``
checked into Hearth's Tools, earlier calls read back from assistant messages, calls written out."""
from __future__ import annotations

import json
from typing import Any, Callable

from ...reply_formats.tools import Tool, ToolError, tools_from_openai
from ...prompt.messages import ToolCall
from .errors import bad


def tool_calls(m: dict, i: int, role: str) -> tuple[ToolCall, ...]:
    """An assistant message's earlier calls, in OpenAI's shape."""
    raw = m.get("tool_calls")
    if raw is None:
        return ()
    where = f"messages[{i}].tool_calls"
    if role != "assistant" or not isinstance(raw, list):
        raise bad(where, f"{where} must be a list, on an assistant message")
    out = []
    for j, c in enumerate(raw):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad(f"{where}[{j}]", f"{where}[{j}] must be {{id, type: function, function: {{name, arguments}}}}")
        args = fn.get("arguments", "{}")
        if isinstance(args, dict):
            args = json.dumps(args, ensure_ascii=False)
        if not isinstance(args, str):
            raise bad(f"{where}[{j}].function.arguments", f"{where}[{j}].function.arguments must be JSON text")
        cid = c.get("id", "")
        if not isinstance(cid, str):
            raise bad(f"{where}[{j}].id", f"{where}[{j}].id must be text")
        out.append(ToolCall(cid, fn["name"], args))
    return tuple(out)


def parse_openai_tools(body: dict, *, flat: bool = False,
                       read: Callable[[], tuple[Tool, ...]] | None = None) -> tuple[tuple[Tool, ...], str, bool]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls``: the tools offered, the choice
    ("auto", "required", "none" or a name) and whether several calls may
    come. ``flat``: the Responses API's shapes (``{type: function, name}``, no ``function`` object);
    ``read``: how the tools are read (the Responses API's namespaces), instead of the plain list."""
    raw, choice, par = body.get("tools"), body.get("tool_choice"), body.get("parallel_tool_calls")
    if par is not None and not isinstance(par, bool):
        raise bad("parallel_tool_calls", "parallel_tool_calls must be true or false")
    parallel = True if par is None else par
    named = "{type: function, name}" if flat else "{type: function, function: {name}}"
    if isinstance(choice, dict):
        fn = choice if flat else choice.get("function")
        if choice.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad("tool_choice", f"tool_choice must be auto, required, none or {named}")
        choice = fn["name"]
    elif choice is not None and choice not in ("auto", "required", "none"):
        raise bad("tool_choice", f"tool_choice must be auto, required, none or {named}")
    return offered(raw, choice, parallel, read or (lambda: tools_from_openai(raw, flat=flat)))


def offered(raw: Any, choice: str | None, parallel: bool,
            read: Callable[[], tuple[Tool, ...]]) -> tuple[tuple[Tool, ...], str, bool]:
    """What every protocol's tool fields come to: the tools (``read()``, ToolError as a 400), the
    choice, checked against them, and ``parallel``. Under "none" the tools stay in the prompt, as
    OpenAI and Anthropic keep them, and the reply is text."""
    if raw is None or raw == []:
        if choice not in (None, "auto", "none"):
            raise bad("tool_choice", "tool_choice needs tools to choose from")
        return (), "auto", parallel
    try:
        tools = read()
    except ToolError as e:
        raise bad(e.param, str(e)) from None
    if choice not in (None, "auto", "required", "none") and choice not in {t.name for t in tools}:
        raise bad("tool_choice", f"tool_choice names {choice!r}, which is not one of the tools")
    return tools, choice or "auto", parallel


def wire_call(c: ToolCall) -> dict[str, Any]:
    """A complete call in a reply: OpenAI's shape, the arguments as JSON text."""
    return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}



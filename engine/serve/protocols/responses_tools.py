"""The Responses API's ``tools``, as coding agents send them.

Function tools come flat (``{type: function, name, parameters, strict}``) or grouped in a
``namespace`` (``{type: namespace, name, tools: [functions]}``, as Codex sends its agent and MCP
tools): a namespace's functions are offered to the model one by one, under their own names (a
name two namespaces share is told apart as ``namespace__name``), and a call to one goes back as
a ``function_call`` item that names its ``namespace`` too, as OpenAI's API writes it.

Tools OpenAI runs on its own servers (``web_search``, ``file_search``, ``code_interpreter``,
``image_generation``, ``computer_use_preview``, remote ``mcp``...) and free-form ``custom``
tools have nothing to run them here: they are left out of the prompt, and the reply says
which, in its ``X-Hearth-Note`` header, instead of refusing the whole request.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ...reply_formats.tools import Tool, ToolError, check_tool

FUNCTION_SHAPE = "{type: 'function', name, parameters}"


@dataclass
class ResponsesTools:
    """What a request's ``tools`` come to."""
    tools: tuple[Tool, ...] = ()
    # the model's name for a namespaced function -> (namespace, the function's own name)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # the types left out (hosted tools)

    def wire_name(self, name: str) -> tuple[str, str | None]:
        """A call's (name, namespace) as the client knows it."""
        ns = self.namespaced.get(name)
        return (ns[1], ns[0]) if ns else (name, None)

    def model_name(self, name: str, namespace: Any) -> str:
        """An earlier call's name (with its namespace) as the model was offered it."""
        if not isinstance(namespace, str):
            return name
        for model, (ns, own) in self.namespaced.items():
            if ns == namespace and own == name:
                return model
        return name

    def note(self) -> str | None:
        if not self.skipped:
            return None
        kinds = ", ".join(dict.fromkeys(self.skipped))
        return f"tools left out: {kinds} (hosted tools run on OpenAI's servers; this server runs function tools)"


def read_responses_tools(raw: Any) -> ResponsesTools:
    """``tools`` checked; a bad function or namespace raises ToolError naming the field."""
    if not isinstance(raw, list):
        raise ToolError(f"tools must be a list of {FUNCTION_SHAPE}")
    found: list[tuple[Tool, str | None]] = []
    skipped: list[str] = []
    for i, t in enumerate(raw):
        kind = t.get("type") if isinstance(t, dict) else None
        if kind == "function":
            found.append((check_tool(t, f"tools[{i}]"), None))
        elif kind == "namespace":
            found += _namespace(t, f"tools[{i}]")
        elif isinstance(kind, str) and kind:
            skipped.append(kind)
        else:
            raise ToolError(f"tools[{i}] must be {FUNCTION_SHAPE} or a namespace of them", f"tools[{i}]")
    own = [t.name for t, _ in found]
    out = ResponsesTools(skipped=skipped)
    tools = []
    for t, ns in found:
        name = t.name
        if ns is not None:
            if own.count(t.name) > 1:
                name = f"{ns}__{t.name}"
            out.namespaced[name] = (ns, t.name)
        tools.append(replace(t, name=name))
    names = [t.name for t in tools]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise ToolError(f"tools: two functions are named {twice!r}", "tools")
    out.tools = tuple(tools)
    return out


def _namespace(t: dict, at: str) -> list[tuple[Tool, str | None]]:
    ns, inner = t.get("name"), t.get("tools")
    if not isinstance(ns, str) or not ns:
        raise ToolError(f"{at}.name must be text: the namespace's name", f"{at}.name")
    if not isinstance(inner, list):
        raise ToolError(f"{at}.tools must be a list of {FUNCTION_SHAPE}", f"{at}.tools")
    out: list[tuple[Tool, str | None]] = []
    for j, fn in enumerate(inner):
        if not isinstance(fn, dict) or fn.get("type", "function") != "function":
            raise ToolError(f"{at}.tools[{j}] must be {FUNCTION_SHAPE}", f"{at}.tools[{j}]")
        out.append((check_tool(fn, f"{at}.tools[{j}]"), ns))
    return out

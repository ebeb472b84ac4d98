"""A reply that calls MCP tools, step by step: which tools the model is offered, under which
names, and what the history keeps of each call. Qt-free.

A reply with tools is a chain of messages in the store: the assistant's step with its
``tool_calls``, one ``tool`` message per call with the result the model is given (and
``tool_call_id``), then the next assistant step, until one answers without a call or the
reply reaches its limit of calls. A tool message's metrics say what the window shows on
its card: the server, the tool, how long the call took and how it ended.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from engine.reply_formats import NAME_RE, Grammar, SchemaError, Tool, check_schema
from engine.prompt import ToolCall

# How a call ended, as its tool message's finish_reason (the card's state when drawn again).
DONE, FAILED, DENIED, STOPPED, UNKNOWN = "tool_done", "tool_error", "tool_denied", "tool_stopped", "tool_unknown"
ENDINGS = (DONE, FAILED, DENIED, STOPPED, UNKNOWN)

DENIED_TEXT = "The user did not allow this call. Do not call it again; answer without it."
STOPPED_TEXT = "The user stopped the reply before this call finished."


@dataclass(frozen=True, slots=True)
class Offered:
    """One tool as the model sees it (``tool``) and where it runs (``server``, ``name``)."""
    tool: Tool
    server: str
    name: str


@dataclass(frozen=True, slots=True)
class Offer:
    """The tools one reply step is offered, and the ones left out with the reason."""
    tools: tuple[Offered, ...] = ()
    left_out: tuple[str, ...] = ()   # "server/tool: why", for the user

    def engine_tools(self) -> tuple[Tool, ...]:
        return tuple(o.tool for o in self.tools)

    def find(self, model_name: str) -> Offered | None:
        return next((o for o in self.tools if o.tool.name == model_name), None)


def _model_name(server: str, tool: str, taken: set[str]) -> str:
    """The tool's own name, or ``server_tool`` when another server has a tool of that name
    (or the name is one the model's call grammar cannot write)."""
    if NAME_RE.match(tool) and tool not in taken:
        return tool
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{server}_{tool}")[:60] or "tool"
    name, n = base, 2
    while name in taken:
        name, n = f"{base[:58]}_{n}", n + 1
    return name


def offer(mcp_tools: Sequence[Any]) -> Offer:
    """The connected servers' tools (``McpTool``: server, name, description, schema) as the
    model's tools. A tool whose schema is not valid JSON Schema (or names a ``$ref`` it lacks) is
    left out and named; every valid one is offered (what the grammar cannot enforce, the validator
    checks on each call)."""
    chosen: list[Offered] = []
    left_out: list[str] = []
    taken: set[str] = set()
    for t in mcp_tools:
        schema = dict(t.schema) if isinstance(t.schema, Mapping) else {}
        schema.setdefault("type", "object")
        try:
            check_schema(schema)
            Grammar().value(schema, "args")
        except SchemaError as e:
            left_out.append(f"{t.server}/{t.name}: {e}")
            continue
        name = _model_name(t.server, t.name, taken)
        taken.add(name)
        chosen.append(Offered(Tool(name, schema, t.description), t.server, t.name))
    return Offer(tuple(chosen), tuple(left_out))


def arguments(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as an object (the grammar made them valid JSON; {} if not an object)."""
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def shown_arguments(call: ToolCall) -> str:
    """The arguments as the card shows them: indented JSON, non-ASCII as it is."""
    try:
        return json.dumps(json.loads(call.arguments or "{}"), indent=2, ensure_ascii=False)
    except ValueError:
        return call.arguments


def card_metrics(server: str, tool: str, seconds: float) -> dict[str, Any]:
    """A tool message's metrics: what its card shows when the conversation is drawn again."""
    return {"tool": {"server": server, "name": tool, "seconds": round(seconds, 3)}}


def calls_in_turn(messages: Sequence[Any]) -> int:
    """How many tool calls the reply being written has made so far: the tool messages after
    the last user message (``messages``: the stored branch, oldest first)."""
    n = 0
    for m in reversed(messages):
        if m.role == "user":
            break
        n += m.role == "tool"
    return n


def first_step(messages: Sequence[Any], mid: int) -> int:
    """The first assistant step of the reply that ends with message ``mid``: a regenerate
    writes the whole reply again, tools included (each call asked again)."""
    ids = [m.id for m in messages]
    if mid not in ids:
        return mid
    first = mid
    for m in reversed(messages[:ids.index(mid) + 1]):
        if m.role == "user":
            break
        if m.role == "assistant":
            first = m.id
    return first

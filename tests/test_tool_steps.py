"""app/core/tool_steps.py: the names MCP tools are offered under, what is left out, and the
message chain of a reply that calls tools."""
from __future__ import annotations

from types import SimpleNamespace as NS

from app.core import tool_steps
from engine.prompt.messages import ToolCall


def tool(server: str, name: str, schema=None):
    return NS(server=server, name=name, description=f"{name} on {server}",
              schema=schema if schema is not None else {"type": "object", "properties": {}})


def test_names_are_the_tools_own_unless_two_servers_share_one():
    o = tool_steps.offer([tool("calc", "add"), tool("other", "add"), tool("web", "fetch page")])
    assert [t.tool.name for t in o.tools] == ["add", "other_add", "web_fetch_page"]
    assert o.find("other_add").server == "other" and o.find("other_add").name == "add"
    assert o.find("fetch page") is None and o.find("web_fetch_page").name == "fetch page"
    assert len(o.engine_tools()) == 3 and o.left_out == ()


def test_a_schema_that_is_not_json_schema_is_left_out_and_named():
    o = tool_steps.offer([tool("calc", "add"), tool("re", "match", {"type": "object", "properties": {
        "s": {"type": "string", "minLength": -1}}})])
    assert [t.name for t in o.tools] == ["add"]
    (why,) = o.left_out
    assert why.startswith("re/match: ") and "not a valid JSON Schema" in why


def test_arguments_are_an_object_whatever_the_text():
    call = ToolCall("c1", "add", '{"a": 1, "b": "ü"}')
    assert tool_steps.arguments(call) == {"a": 1, "b": "ü"}
    assert '"ü"' in tool_steps.shown_arguments(call)
    assert tool_steps.arguments(ToolCall("c2", "add", "[1]")) == {}
    assert tool_steps.arguments(ToolCall("c3", "add", "{bad")) == {}
    assert tool_steps.shown_arguments(ToolCall("c3", "add", "{bad")) == "{bad"


def msg(mid: int, role: str) -> NS:
    return NS(id=mid, role=role)


def test_a_reply_is_counted_and_regenerated_from_its_first_step():
    chain = [msg(1, "user"), msg(2, "assistant"), msg(3, "tool"), msg(4, "user"), msg(5, "assistant"),
             msg(6, "tool"), msg(7, "tool"), msg(8, "assistant")]
    assert tool_steps.calls_in_turn(chain) == 2
    assert tool_steps.calls_in_turn(chain[:4]) == 0
    assert tool_steps.first_step(chain, 8) == 5
    assert tool_steps.first_step(chain, 2) == 2
    assert tool_steps.first_step(chain, 99) == 99

"""Function tools on the Responses endpoint, driven by the official ``openai`` client's
``client.responses``. The bundled model wears Qwen 2.5's real template (serving.qwen_tool_engine);
``tool_choice`` required or named forces a call through the grammar, and every call's arguments
are checked against the tool's schema with ``jsonschema``."""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from serving import local_server, qwen_tool_engine

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city", "strict": True,
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 30},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"], "additionalProperties": False}}
ADD = {"type": "function", "name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["name"]: t["parameters"] for t in TOOLS}
ASK = "What is the weather in Zürich?"


@pytest.fixture(scope="module")
def server(bundled_path):
    with qwen_tool_engine(bundled_path) as e, local_server(e, parallel=2, queue_limit=8) as srv:
        yield srv


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=120)


def respond(client, server, input=ASK, **kw):
    return client.responses.create(model=server.model_id, input=input, temperature=0,
                                   **{"max_output_tokens": 120, **kw})


def valid(item) -> dict:
    assert item.type == "function_call" and item.name in SCHEMAS and item.status == "completed"
    args = json.loads(item.arguments)
    jsonschema.validate(args, SCHEMAS[item.name])
    return args


def calls(r) -> list:
    return [o for o in r.output if o.type == "function_call"]


def test_required_makes_a_function_call_item(client, server):
    r = respond(client, server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    assert r.status == "completed" and r.parallel_tool_calls is False and len(r.tools) == 2
    [item] = calls(r)
    assert item.id.startswith("fc_") and item.call_id.startswith("call_")
    valid(item)


def test_a_named_function_is_the_one_called(client, server):
    r = respond(client, server, input="Add 2 and 3.", tools=TOOLS, parallel_tool_calls=False,
                tool_choice={"type": "function", "name": "add"})
    [item] = calls(r)
    assert item.name == "add" and set(valid(item)) == {"a", "b"}


def _run(item) -> str:
    args = json.loads(item.arguments)
    return f"{args['city']}: 21 °C, sonnig ☀" if item.name == "get_weather" else str(args["a"] + args["b"])


def test_an_agent_loop_with_the_whole_input(client, server):
    """Call, run the tool here (the client's job), send the call and its output back, get the answer."""
    first = respond(client, server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    [item] = calls(first)
    valid(item)
    again = [{"role": "user", "content": ASK}, *[o.model_dump(exclude_none=True) for o in first.output],
             {"type": "function_call_output", "call_id": item.call_id, "output": _run(item)}]
    second = respond(client, server, input=again, tools=TOOLS, max_output_tokens=30)
    assert second.status in ("completed", "incomplete")
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 1
    if not calls(second):
        assert second.output_text


def test_previous_response_id_carries_the_call(client, server):
    first = respond(client, server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    [item] = calls(first)
    whole = respond(client, server, tools=TOOLS, max_output_tokens=1, input=[
        {"role": "user", "content": ASK}, *[o.model_dump(exclude_none=True) for o in first.output],
        {"type": "function_call_output", "call_id": item.call_id, "output": _run(item)}])
    chained = respond(client, server, tools=TOOLS, max_output_tokens=1, previous_response_id=first.id, input=[
        {"type": "function_call_output", "call_id": item.call_id, "output": _run(item)}])
    # The stored conversation holds the call: the same prompt as sending it all again.
    assert chained.usage.input_tokens == whole.usage.input_tokens > first.usage.input_tokens


def test_a_streamed_call_has_the_responses_events(client, server):
    whole = respond(client, server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    events = list(respond(client, server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                          stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.status == "in_progress"
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    item_done = next(e for e in events if e.type == "response.output_item.done")
    assert deltas == done.arguments == item_done.item.arguments
    assert done.item_id == added.item.id == item_done.item.id
    [want] = calls(whole)
    assert (item_done.item.name, json.loads(done.arguments)) == (want.name, json.loads(want.arguments))
    [got] = calls(events[-1].response)
    valid(got)
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_auto_lets_the_model_answer_in_text(client, server):
    r = respond(client, server, input="Say hello.", tools=TOOLS, max_output_tokens=12)
    assert not calls(r) and r.output_text


def test_codex_namespaces_are_offered_and_hosted_tools_left_out_with_a_note(client, server):
    """Codex groups its agent tools in a namespace and asks for OpenAI's hosted web_search: the
    namespace's functions are offered, a call names its namespace as OpenAI's does, and the hosted
    tool is left out (the X-Hearth-Note header says so) instead of failing the request."""
    agents = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents", "tools": [
        {**ADD, "name": "spawn_agent"}]}
    raw = client.responses.with_raw_response.create(
        model=server.model_id, input="Spawn an agent.", temperature=0, max_output_tokens=60,
        tools=[WEATHER, agents, {"type": "web_search", "external_web_access": False}],
        tool_choice={"type": "function", "name": "spawn_agent"}, parallel_tool_calls=False)
    assert "web_search" in raw.headers["x-hearth-note"]
    [item] = calls(raw.parse())
    assert (item.name, item.namespace) == ("spawn_agent", "multi_agent_v1")
    jsonschema.validate(json.loads(item.arguments), ADD["parameters"])
    # The call and its result come back as input, namespace and all: the conversation goes on.
    back = [{"role": "user", "content": "Spawn an agent."},
            {"type": "function_call", "call_id": item.call_id, "name": "spawn_agent", "namespace": "multi_agent_v1",
             "arguments": item.arguments},
            {"type": "function_call_output", "call_id": item.call_id, "output": "agent 7 started"}]
    r = respond(client, server, input=back, tools=[agents], max_output_tokens=8)
    assert r.status in ("completed", "incomplete") and r.output


def test_a_name_two_namespaces_share_is_told_apart():
    from engine.serve.protocols.responses_tools import read_responses_tools

    found = read_responses_tools([{"type": "namespace", "name": n, "tools": [ADD]} for n in ("a", "b")])
    assert [t.name for t in found.tools] == ["a__add", "b__add"]
    assert found.wire_name("b__add") == ("add", "b") and found.model_name("add", "b") == "b__add"
    assert found.wire_name("other") == ("other", None) and found.note() is None


@pytest.mark.parametrize("body, param", [
    ({"tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name"),
    ({"tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}]}, "tools[0].tools[0]"),
    ({"tools": [{"type": "namespace", "tools": [ADD]}]}, "tools[0].name"),
    ({"tools": [ADD, ADD]}, "tools"),
    ({"tools": [{**ADD, "strict": "yes"}]}, "tools[0].strict"),
    ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {
        "s": {"type": "string", "minLength": -1}}}}]}, "tools[0].parameters"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "input": [{"type": "function_call", "name": "add", "arguments": "{}"}]}, "input[0].call_id"),
    ({"tools": TOOLS, "input": [{"type": "function_call_output", "output": "5"}]}, "input[0].call_id"),
])
def test_bad_tool_requests_are_a_400_naming_the_field(client, server, body, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=server.model_id, input=ASK, max_output_tokens=5, extra_body=body)
    assert e.value.body["param"] == param

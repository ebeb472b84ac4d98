"""Tool use on the Anthropic Messages endpoint, driven by the official ``anthropic`` client.

The bundled model wears Qwen 2.5's real template (serving.qwen_tool_engine); ``tool_choice``
any or a named tool forces a call through the grammar. Every call's input is checked against
the tool's schema with ``jsonschema``."""
from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import pytest

from engine.backends.llama.backend import LlamaCppBackend
from engine.engine import Engine
from serving import local_server, qwen_tool_engine

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 30},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}
ADD = {"name": "add", "input_schema": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                         "b": {"type": "integer"}},
                                       "required": ["a", "b"]}}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["name"]: t["input_schema"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Zürich?"}]
ONE = {"type": "any", "disable_parallel_tool_use": True}


@pytest.fixture(scope="module")
def server(bundled_path):
    with qwen_tool_engine(bundled_path) as e, local_server(e, parallel=2, queue_limit=8) as srv:
        yield srv


def url(srv) -> str:
    return f"http://127.0.0.1:{srv.port}"


@pytest.fixture
def client(server):
    return anthropic.Anthropic(base_url=url(server), api_key="unused", max_retries=0, timeout=120)


def create(client, server, messages=ASK, max_tokens=120, **kw):
    return client.messages.create(model=server.model_id, max_tokens=max_tokens, messages=messages,
                                  extra_body={"temperature": 0}, **kw)


def valid(block) -> dict:
    assert block.type == "tool_use" and block.name in SCHEMAS
    jsonschema.validate(block.input, SCHEMAS[block.name])
    return block.input


def test_any_makes_a_tool_use_block(client, server):
    r = create(client, server, tools=TOOLS, tool_choice=ONE)
    assert r.stop_reason == "tool_use"
    [block] = [b for b in r.content if b.type == "tool_use"]
    assert block.id.startswith("toolu_") and len(block.id) > len("toolu_")
    valid(block)


def test_a_named_tool_is_the_one_called(client, server):
    r = create(client, server, messages=[{"role": "user", "content": "Add 2 and 3."}], tools=TOOLS,
               tool_choice={"type": "tool", "name": "add", "disable_parallel_tool_use": True})
    [block] = r.content
    assert block.name == "add" and set(valid(block)) == {"a", "b"}


def test_an_agent_loop_call_result_answer(client, server):
    """Call, run the tool here (the client's job), send a tool_result back, get the answer."""
    first = create(client, server, tools=TOOLS, tool_choice=ONE)
    call = next(b for b in first.content if b.type == "tool_use")
    args = valid(call)
    result = {"get_weather": lambda a: f"{a['city']}: 21 °C, sonnig ☀", "add": lambda a: str(a["a"] + a["b"])}
    messages = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                              "content": [{"type": "text", "text": result[call.name](args)}]}]}]
    second = create(client, server, messages=messages, tools=TOOLS, max_tokens=30)
    assert second.stop_reason in ("end_turn", "max_tokens", "tool_use")
    # The call and its result went back through the template: the prompt grew by both.
    grew = second.usage.input_tokens + second.usage.cache_read_input_tokens
    assert grew > first.usage.input_tokens + first.usage.cache_read_input_tokens + first.usage.output_tokens
    assert second.usage.cache_read_input_tokens >= first.usage.input_tokens - 1
    if second.stop_reason != "tool_use":
        assert second.content[0].type == "text" and second.content[0].text


def test_a_result_marked_as_an_error_reaches_the_model(client, server):
    first = create(client, server, tools=TOOLS, tool_choice=ONE)
    call = next(b for b in first.content if b.type == "tool_use")
    turn = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]}]
    ok = create(client, server, max_tokens=1, tools=TOOLS, messages=[*turn, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "content": "no such city"}]}])
    failed = create(client, server, max_tokens=1, tools=TOOLS, messages=[*turn, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "content": "no such city", "is_error": True}]}])
    total = [u.input_tokens + u.cache_read_input_tokens for u in (ok.usage, failed.usage)]
    assert total[1] > total[0]  # "Error: " went in before the text


def test_the_stream_helper_assembles_the_tool_use_block(client, server):
    whole = create(client, server, tools=TOOLS, tool_choice=ONE)
    with client.messages.stream(model=server.model_id, max_tokens=120, messages=ASK, tools=TOOLS,
                                tool_choice=ONE, extra_body={"temperature": 0}) as s:
        kinds = [ev.type for ev in s]
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    want = next(b for b in whole.content if b.type == "tool_use")
    got = next(b for b in final.content if b.type == "tool_use")
    assert (got.name, got.input) == (want.name, want.input) and got.id.startswith("toolu_")
    assert "input_json" in kinds and kinds[-1] == "message_stop"


def test_stream_true_sends_anthropic_events_for_a_call(client, server):
    events = list(client.messages.create(model=server.model_id, max_tokens=120, messages=ASK, tools=TOOLS,
                                         tool_choice=ONE, stream=True, extra_body={"temperature": 0}))
    starts = [e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use"]
    [start] = starts
    assert start.content_block.input == {} and start.content_block.name in SCHEMAS
    deltas = [e.delta.partial_json for e in events if e.type == "content_block_delta"
              and e.delta.type == "input_json_delta" and e.index == start.index]
    jsonschema.validate(json.loads("".join(deltas)), SCHEMAS[start.content_block.name])
    assert any(e.type == "content_block_stop" and e.index == start.index for e in events)
    [delta] = [e for e in events if e.type == "message_delta"]
    assert delta.delta.stop_reason == "tool_use"


def test_auto_lets_the_model_answer_in_text(client, server):
    r = create(client, server, messages=[{"role": "user", "content": "Say hello."}], max_tokens=12, tools=TOOLS)
    assert r.stop_reason in ("end_turn", "max_tokens") and r.content[0].type == "text" and r.content[0].text


def test_tool_choice_none_answers_in_text_with_the_tools_in_the_prompt(client, server):
    r = create(client, server, max_tokens=8, tools=TOOLS, tool_choice={"type": "none"})
    assert all(b.type == "text" for b in r.content) and r.stop_reason != "tool_use"
    auto = create(client, server, max_tokens=1, tools=TOOLS)
    seen = [x.usage.input_tokens + (x.usage.cache_read_input_tokens or 0) for x in (r, auto)]
    assert seen[0] == seen[1]  # the same prompt as under auto: the tools are shown, not dropped


@pytest.mark.parametrize("body, field", [
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({"tools": [{"name": "bad name", "input_schema": {"type": "object"}}]}, "tools[0].name"),
    ({"tools": [{"name": "f", "input_schema": {"type": "object", "properties": {
        "s": {"type": "string", "minLength": -1}}}}]}, "tools[0].input_schema"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
    ({"tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ({"tools": TOOLS, "messages": [*ASK, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": "2+3"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "5"}]}]},
     "messages[1].content[0].input"),
    ({"tools": TOOLS, "messages": [{"role": "user", "content": [{"type": "tool_result", "content": "5"}]}]},
     "messages[0].content[0].tool_use_id"),
])
def test_bad_tool_requests_are_a_400_in_anthropics_shape_naming_the_field(server, body, field):
    r = httpx.post(f"{url(server)}/v1/messages", timeout=60, json={
        "model": server.model_id, "max_tokens": 5, "messages": ASK, **body})
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert field in err["error"]["message"]


def test_a_model_whose_template_takes_no_tools_says_so(bundled_path):
    e = Engine(LlamaCppBackend(bundled_path, n_ctx=1024, n_threads=2))
    try:
        with local_server(e, parallel=1, queue_limit=4) as srv:
            c = anthropic.Anthropic(base_url=url(srv), api_key="unused", max_retries=0, timeout=60)
            with pytest.raises(anthropic.BadRequestError) as err:
                c.messages.create(model=srv.model_id, max_tokens=5, messages=ASK, tools=TOOLS)
            assert "cannot call tools" in err.value.body["error"]["message"]
    finally:
        e.close()


def test_count_tokens_counts_the_prompt_a_request_would_read(client, server):
    """Claude Code asks ``/v1/messages/count_tokens`` before long requests: the count is the
    prompt the same Messages request reads (system and tools included), with no max_tokens."""
    kw = {"system": "Answer briefly.", "tools": TOOLS}
    counted = client.messages.count_tokens(model=server.model_id, messages=ASK, **kw).input_tokens
    r = create(client, server, max_tokens=4, **kw)
    assert counted == r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0)
    bare = client.messages.count_tokens(model=server.model_id, messages=ASK).input_tokens
    assert 0 < bare < counted  # the tools' descriptions are in the prompt
    # Longer than the context: still counted whole (nothing is left out of a count).
    long = [{"role": "user", "content": "word " * 20_000}]
    assert client.messages.count_tokens(model=server.model_id, messages=long).input_tokens > 20_000
    r = httpx.post(f"{url(server)}/v1/messages/count_tokens", timeout=60,
                   json={"model": server.model_id, "messages": "hello"})
    assert r.status_code == 400 and r.json()["type"] == "error", r.text
    assert r.json()["error"]["type"] == "invalid_request_error" and "messages" in r.json()["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", messages=ASK)

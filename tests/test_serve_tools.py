"""Function calling through the local API, driven by the official ``openai`` client.

The bundled model wears Qwen 2.5's real chat template (Hermes ``<tool_call>`` syntax), as
if its GGUF carried it: the template renders the tools and the tool results, the grammar
built from the tools' schemas makes every call, the parser turns the call into
``tool_calls``. ``tool_choice`` required or named forces a call from the first token.
Every call's arguments are checked against the tool's schema with ``jsonschema``.
"""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from engine.backends.llama.backend import LlamaCppBackend
from engine.engine import Engine
from serving import local_server, qwen_tool_engine

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                  "required": ["a", "b"]}}}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Zürich?"}]


@pytest.fixture(scope="module")
def server(bundled_path):
    with qwen_tool_engine(bundled_path) as e, local_server(e, parallel=2, queue_limit=8) as srv:
        yield srv


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def chat(client, server, messages=ASK, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 120)
    return client.chat.completions.create(model=server.model_id, messages=messages, **kw)


def valid(call) -> dict:
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, SCHEMAS[call.function.name])
    return args


def test_a_required_call_comes_back_as_tool_calls(client, server):
    r = chat(client, server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name in SCHEMAS
    valid(call)


def test_a_named_function_is_the_one_called(client, server):
    r = chat(client, server, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
             parallel_tool_calls=False, messages=[{"role": "user", "content": "Add 2 and 3."}])
    [call] = r.choices[0].message.tool_calls
    assert call.function.name == "add"
    assert set(valid(call)) == {"a", "b"}


def test_streamed_calls_arrive_as_tool_call_deltas(client, server):
    whole = chat(client, server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    calls: dict[int, dict] = {}
    reasons = []
    for chunk in chat(client, server, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, stream=True):
        for c in chunk.choices:
            reasons.append(c.finish_reason)
            for d in c.delta.tool_calls or ():
                slot = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = d.id or slot["id"]
                slot["name"] += (d.function.name or "") if d.function else ""
                slot["arguments"] += (d.function.arguments or "") if d.function else ""
    assert reasons[-1] == "tool_calls"
    [got] = calls.values()
    want = whole.choices[0].message.tool_calls[0]
    assert (got["name"], json.loads(got["arguments"])) == (want.function.name, json.loads(want.function.arguments))
    assert got["id"].startswith("call_")


def test_an_agent_loop_call_result_answer(client, server):
    """Call, run the tool here (the client's job), send the result back, get the answer."""
    messages = list(ASK)
    first = chat(client, server, messages=messages, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    call = first.choices[0].message.tool_calls[0]
    args = valid(call)
    result = {"get_weather": lambda a: {"city": a["city"], "temp_c": 21, "sky": "sonnig ☀"},
              "add": lambda a: {"sum": a["a"] + a["b"]}}[call.function.name](args)
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result, ensure_ascii=False)})
    second = chat(client, server, messages=messages, tools=TOOLS, max_tokens=40)
    c = second.choices[0]
    assert c.finish_reason in ("stop", "length", "tool_calls")
    # The result went back through the template: the second prompt is the first plus the call and result.
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + first.usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1
    if c.finish_reason != "tool_calls":
        assert c.message.content


def test_auto_lets_the_model_answer_in_text(client, server):
    r = chat(client, server, tools=TOOLS, messages=[{"role": "user", "content": "Say hello."}], max_tokens=12)
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length") and c.message.tool_calls is None and c.message.content


def test_a_budget_too_small_for_any_call_is_length_with_no_tool_calls(client, server):
    # Six tokens cannot hold the shortest complete call: the reply ends before it writes one (decode/call_closing.py),
    # never with half a call; a budget that can hold one closes it (tests/test_call_closing.py).
    r = chat(client, server, tools=TOOLS, tool_choice="required", max_tokens=6)
    c = r.choices[0]
    assert c.finish_reason == "length" and not c.message.tool_calls
    assert c.message.content == "" and r.usage.completion_tokens == 0


@pytest.mark.parametrize("body, param", [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "minLength": -1}}}}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
])
def test_bad_tool_requests_are_a_400_naming_the_field(client, server, body, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=server.model_id, messages=ASK, max_tokens=5, extra_body=body)
    assert e.value.body["param"] == param


def test_a_tool_message_needs_its_call_id(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, server, messages=[*ASK, {"role": "tool", "content": "21"}], tools=TOOLS)
    assert "tool_call_id" in e.value.body["param"]


def test_tool_choice_none_answers_in_text_with_the_tools_still_in_the_prompt(client, server):
    r = chat(client, server, tools=TOOLS, tool_choice="none", max_tokens=8)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason in ("stop", "length")
    # The tools stay in the prompt, as OpenAI keeps them: the same prompt as under auto (so the same
    # cached prefix), longer than the prompt without them.
    auto = chat(client, server, tools=TOOLS, max_tokens=1)
    bare = chat(client, server, max_tokens=1)
    assert r.usage.prompt_tokens == auto.usage.prompt_tokens > bare.usage.prompt_tokens
    # Streamed too: text deltas only.
    chunks = list(chat(client, server, tools=TOOLS, tool_choice="none", max_tokens=8, stream=True))
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)


def test_a_model_whose_template_takes_no_tools_says_so(bundled_path):
    e = Engine(LlamaCppBackend(bundled_path, n_ctx=1024, n_threads=2))
    try:
        with local_server(e, parallel=2, queue_limit=8) as srv:
            c = openai.OpenAI(base_url=srv.url, api_key="unused", max_retries=0, timeout=60)
            with pytest.raises(openai.BadRequestError) as err:
                c.chat.completions.create(model=srv.model_id, messages=ASK, tools=TOOLS, max_tokens=5)
            # tool_choice "none" asks only for text, which such a model writes.
            r = c.chat.completions.create(model=srv.model_id, messages=ASK, tools=TOOLS, tool_choice="none",
                                          max_tokens=5, temperature=0)
            assert r.choices[0].message.content and r.choices[0].message.tool_calls is None
        assert err.value.body["code"] == "tools_not_supported"
        assert "cannot call tools" in err.value.body["message"]
    finally:
        e.close()

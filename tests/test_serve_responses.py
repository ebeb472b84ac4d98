"""The local server's Responses endpoint (``POST /v1/responses``), driven by the official ``openai``
client's ``client.responses`` against the bundled model through the real scheduler; its
replies must be the chat path's replies to the same conversation."""
from __future__ import annotations

import dataclasses
import json

import openai
import pytest

from engine.backends.llama.backend import LlamaCppBackend
from engine.engine import Engine
from engine.prompt.messages import Message
from engine.models.gguf import model_info
from engine.serve.protocols.responses import ResponseStore
from serving import local_server
from tests.test_serve_reasoning import QWEN3, THINK

ASK = "What is the capital of France?"


@pytest.fixture(scope="module")
def server(engine):
    with local_server(engine, parallel=2, queue_limit=8) as srv:
        yield srv


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=120)


def respond(client, server, input=ASK, **kw):
    return client.responses.create(model=server.model_id, input=input, temperature=0,
                                   **{"max_output_tokens": 16, **kw})


def chat(client, server, messages, max_tokens=16):
    return client.chat.completions.create(model=server.model_id, messages=messages, temperature=0,
                                          max_tokens=max_tokens)


def test_a_response_is_the_chat_reply_to_the_same_messages(client, server):
    r = respond(client, server, instructions="Answer in one short sentence.")
    c = chat(client, server, [{"role": "system", "content": "Answer in one short sentence."},
                              {"role": "user", "content": ASK}])
    assert r.id.startswith("resp_") and r.object == "response" and r.status == "completed"
    assert r.output_text == c.choices[0].message.content and r.output_text
    assert [o.type for o in r.output] == ["message"] and r.output[0].role == "assistant"
    assert r.usage.input_tokens == c.usage.prompt_tokens and r.usage.output_tokens == c.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.instructions == "Answer in one short sentence." and r.max_output_tokens == 16
    # input as message items (string or input_text parts) is the same request
    items = respond(client, server, instructions="Answer in one short sentence.", input=[
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]}])
    assert items.output_text == r.output_text and items.usage.input_tokens == r.usage.input_tokens


def test_previous_response_id_continues_the_conversation(client, server):
    first = respond(client, server)
    second = respond(client, server, input="And of Italy?", previous_response_id=first.id)
    history = [{"role": "user", "content": ASK}, {"role": "assistant", "content": first.output_text},
               {"role": "user", "content": "And of Italy?"}]
    c = chat(client, server, history)
    assert second.previous_response_id == first.id
    assert second.output_text == c.choices[0].message.content
    assert second.usage.input_tokens == c.usage.prompt_tokens
    third = respond(client, server, input="And of Spain?", previous_response_id=second.id, max_output_tokens=2)
    assert third.usage.input_tokens > second.usage.input_tokens
    with pytest.raises(openai.NotFoundError) as e:
        respond(client, server, previous_response_id="resp_unknown")
    assert e.value.body["code"] == "previous_response_not_found" and e.value.body["param"] == "previous_response_id"
    unkept = respond(client, server, store=False, max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        respond(client, server, previous_response_id=unkept.id)


def test_the_store_keeps_the_latest_responses_only():
    store = ResponseStore(keep=3)
    for i in range(5):
        store.put(f"r{i}", (Message("user", str(i)),))
    assert len(store) == 3 and store.get("r0") is None and store.get("r1") is None
    assert store.get("r4") == (Message("user", "4"),)


def test_streaming_sends_the_responses_event_sequence(client, server):
    whole = respond(client, server)
    events = list(respond(client, server, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed" if whole.status == "completed" else "response.incomplete"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-4].text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens
    # The client's stream helper wants a completed response (one cut by max_output_tokens is incomplete).
    brief = "Answer in one short sentence."
    done = respond(client, server, instructions=brief)
    assert done.status == "completed"
    with client.responses.stream(model=server.model_id, input=ASK, instructions=brief, temperature=0,
                                 max_output_tokens=16) as s:
        deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
        final = s.get_final_response()
    assert "".join(deltas) == final.output_text == done.output_text and final.status == "completed"


def test_max_output_tokens_makes_an_incomplete_response(client, server):
    r = respond(client, server, max_output_tokens=2)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 2


def test_json_schema_format_is_followed(client, server):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    r = respond(client, server, input="Reply in JSON: the capital of France.", max_output_tokens=40,
                text={"format": {"type": "json_schema", "name": "city", "schema": schema}})
    assert set(json.loads(r.output_text)) == {"city"}


def test_unsupported_inputs_are_a_clear_400(client, server):
    with pytest.raises(openai.BadRequestError, match="this model cannot call tools"):
        respond(client, server, tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}])
    with pytest.raises(openai.BadRequestError, match="web_search_call' items are not supported"):
        respond(client, server, input=[{"type": "web_search_call", "id": "ws_1", "status": "completed"}])
    with pytest.raises(openai.BadRequestError, match=r"input\[0\]\.content\[0\]\.image_url: the image is"):
        respond(client, server, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}])
    with pytest.raises(openai.BadRequestError, match="fetches nothing from the network"):
        respond(client, server, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/a.png"}]}])
    with pytest.raises(openai.BadRequestError, match="max_output_tokens"):
        respond(client, server, max_output_tokens=0)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.responses.create(model="gpt-5", input="hi")


@pytest.fixture(scope="module")
def thinking(bundled_path):
    info = dataclasses.replace(model_info(bundled_path), chat_template=QWEN3)
    e = Engine(LlamaCppBackend(bundled_path, n_ctx=2048, n_threads=2, info=info))
    with local_server(e, parallel=1, queue_limit=4) as srv:
        yield srv
    e.close()


def test_a_thinking_models_reasoning_is_a_reasoning_item_before_the_message(thinking):
    c = openai.OpenAI(base_url=thinking.url, api_key="x", max_retries=0, timeout=120)
    q = [{"role": "user", "content": "Say hi. 🙂"}]
    ref = c.chat.completions.create(model=thinking.model_id, messages=q, max_tokens=60, temperature=0,
                                    extra_body={"grammar": THINK})
    reasoning = (ref.choices[0].message.model_extra or {})["reasoning_content"]
    r = c.responses.create(model=thinking.model_id, input=q[0]["content"], max_output_tokens=60, temperature=0,
                           extra_body={"grammar": THINK})
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == reasoning and r.output_text == ref.choices[0].message.content
    assert r.usage.output_tokens_details.reasoning_tokens == ref.usage.completion_tokens_details.reasoning_tokens
    events = list(c.responses.create(model=thinking.model_id, input=q[0]["content"], max_output_tokens=60,
                                     temperature=0, stream=True, extra_body={"grammar": THINK}))
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["reasoning", "message"]
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == reasoning
    assert [o.type for o in events[-1].response.output] == ["reasoning", "message"]
    # The reply's reasoning goes back with it when a response is continued.
    respond(c, thinking, input="Again?", previous_response_id=r.id, max_output_tokens=1)
    assert thinking.finished[-1].request.messages[1].reasoning == reasoning

"""The local server's Anthropic Messages endpoint (``POST /v1/messages``), driven by the official
``anthropic`` client and plain ``httpx`` against the bundled model through the real scheduler.

The client of this version takes no sampling arguments of its own (newer Claude models refuse
them), so ``temperature`` travels as clients send such fields: ``extra_body``."""
from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from engine.serve.http.server import LocalServer
from engine.serve.runtime.scheduler import Scheduler
from serving import hold_one, local_server

Q = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def server(engine):
    with local_server(engine, parallel=2, queue_limit=8) as srv:
        yield srv


def base_url(srv) -> str:
    return f"http://127.0.0.1:{srv.port}"


@pytest.fixture
def client(server):
    return anthropic.Anthropic(base_url=base_url(server), api_key="unused", max_retries=0, timeout=120)


def create(client, server, messages=Q, max_tokens=12, **kw):
    extra = {**GREEDY, **kw.pop("extra_body", {})}
    return client.messages.create(model=server.model_id, max_tokens=max_tokens, messages=messages,
                                  extra_body=extra, **kw)


def post(server, body: dict | bytes, **headers) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{base_url(server)}/v1/messages", content=raw, timeout=120,
                      headers={"content-type": "application/json", **headers})


def anthropic_error(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind
    return body["error"]["message"]


def test_a_reply_is_the_same_greedy_reply_the_openai_path_gives(client, server):
    r = create(client, server)
    assert r.id.startswith("msg_") and r.type == "message" and r.role == "assistant"
    assert r.model == server.model_id
    assert [b.type for b in r.content] == ["text"] and r.content[0].text
    assert r.stop_reason in ("end_turn", "max_tokens") and r.stop_sequence is None
    o = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0).chat.completions.create(
        model=server.model_id, messages=Q, max_tokens=12, temperature=0)
    assert r.content[0].text == o.choices[0].message.content
    assert r.usage.output_tokens == o.usage.completion_tokens
    # OpenAI's prompt_tokens holds the cached tokens; Anthropic's input_tokens does not.
    u = r.usage
    assert u.input_tokens + u.cache_read_input_tokens == o.usage.prompt_tokens
    assert u.cache_creation_input_tokens == 0


def test_a_second_identical_prefix_is_read_from_the_cache_and_not_counted_twice(client, server):
    msgs = [{"role": "user", "content": "Name three colours of the rainbow, please."}]
    system = "You are a terse assistant who answers in a few words."
    first = create(client, server, messages=msgs, system=system, max_tokens=6)
    second = create(client, server, messages=msgs, system=system, max_tokens=6)
    total = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens == total
    assert second.usage.cache_read_input_tokens >= total // 2  # all of the prompt but its last token
    assert second.usage.input_tokens >= 1 and second.usage.input_tokens < first.usage.input_tokens
    assert second.content[0].text == first.content[0].text


def test_system_as_text_blocks_with_cache_control_is_the_same_prompt(client, server):
    as_text = create(client, server, system="Answer in French.", max_tokens=4)
    cache = {"cache_control": {"type": "ephemeral"}}  # accepted, and changes nothing: the cache is automatic
    blocks = create(client, server, max_tokens=4, system=[
        {"type": "text", "text": "Answer in "}, {"type": "text", "text": "French.", **cache}])
    content = create(client, server, max_tokens=4, system="Answer in French.", messages=[
        {"role": "user", "content": [{"type": "text", "text": Q[0]["content"], **cache}]}])
    prompt = [u.input_tokens + u.cache_read_input_tokens for u in (as_text.usage, blocks.usage, content.usage)]
    assert prompt[0] == prompt[1] == prompt[2]
    assert as_text.content[0].text == blocks.content[0].text == content.content[0].text


def test_streaming_with_the_clients_stream_helper(client, server):
    whole = create(client, server)
    with client.messages.stream(model=server.model_id, max_tokens=12, messages=Q, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text == final.content[0].text
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    assert final.id.startswith("msg_")


def test_stream_true_sends_anthropics_event_sequence(client, server):
    events = list(create(client, server, max_tokens=5, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[1] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    assert all(e.delta.type == "text_delta" and e.index == 0 for e in events[2:-3])
    assert events[0].message.usage.output_tokens == 0 and events[0].message.content == []
    assert events[-2].delta.stop_reason == "max_tokens" and events[-2].usage.output_tokens == 5
    # The raw framing: an event line and a data line per event, and the data's type is the event's.
    body = {"model": server.model_id, "max_tokens": 3, "stream": True, "messages": Q, **GREEDY}
    with httpx.stream("POST", f"{base_url(server)}/v1/messages", json=body, timeout=120) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    frames = [f for f in raw.split("\n\n") if f and not f.startswith(":")]
    for f in frames:
        event, data = f.split("\n")
        assert json.loads(data.removeprefix("data: "))["type"] == event.removeprefix("event: ")


def test_stop_sequences_and_max_tokens_set_the_stop_reason(client, server):
    text = create(client, server).content[0].text
    words = text.split()
    assert len(words) >= 3, text
    r = create(client, server, stop_sequences=["zzz-never", words[2]])
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == words[2]
    assert r.content[0].text == text[:text.index(words[2])]
    streamed = list(create(client, server, stop_sequences=[words[2]], stream=True))
    assert streamed[-2].delta.stop_reason == "stop_sequence" and streamed[-2].delta.stop_sequence == words[2]
    cut = create(client, server, max_tokens=2)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2


def test_bad_requests_raise_the_right_anthropic_errors(client, server):
    with pytest.raises(anthropic.NotFoundError, match="not served here") as e:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=Q)
    assert e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError, match="this model cannot call tools"):
        create(client, server, tools=[{"name": "get_weather", "description": "the weather",
                                       "input_schema": {"type": "object", "properties": {}}}])
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError, match=r"messages\[0\]\.content\[0\]\.source: the image is"):
        create(client, server, messages=[{"role": "user", "content": [image, {"type": "text", "text": "What?"}]}])
    by_url = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    with pytest.raises(anthropic.BadRequestError, match="fetches nothing from the network"):
        create(client, server, messages=[{"role": "user", "content": [by_url, {"type": "text", "text": "What?"}]}])
    with pytest.raises(anthropic.BadRequestError, match="a tool_use block belongs in an assistant turn"):
        create(client, server, messages=[{"role": "user", "content": [
            {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}])
    with pytest.raises(anthropic.BadRequestError, match="server_tool_use blocks are not supported"):
        create(client, server, messages=[*Q, {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "t1", "name": "web_search", "input": {}}]}, *Q])
    with pytest.raises(anthropic.BadRequestError, match="prefill"):
        create(client, server, messages=[*Q, {"role": "assistant", "content": "The capital is"}])
    with pytest.raises(anthropic.BadRequestError, match="temperature"):
        create(client, server, extra_body={"temperature": 1.5})
    with pytest.raises(anthropic.BadRequestError, match="context"):
        create(client, server, messages=[{"role": "user", "content": "word " * 5000}])
    m = anthropic_error(post(server, {"model": server.model_id, "messages": Q}), 400, "invalid_request_error")
    assert "max_tokens is required" in m
    anthropic_error(post(server, b'{"model": "x", "messages": ['), 400, "invalid_request_error")
    deep = b'{"model": "m", "max_tokens": 1, "messages": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    assert "nests more than" in anthropic_error(post(server, deep), 400, "invalid_request_error")
    assert "role" in anthropic_error(post(server, {"model": server.model_id, "max_tokens": 1, "messages": [
        {"role": ["user"], "content": "hi"}]}), 400, "invalid_request_error")
    # and it still answers
    assert create(client, server, max_tokens=2).content[0].text is not None


def test_a_bug_in_the_route_is_an_anthropic_api_error(server, monkeypatch):
    def boom(*_a, **_k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(server.targets, "lease", boom)
    m = anthropic_error(post(server, {"model": "m", "max_tokens": 1, "messages": Q}), 500, "api_error")
    assert "RuntimeError: kaboom" in m


def test_the_api_key_as_x_api_key_or_bearer(server):
    server.api_key = "s3cret"
    try:
        with pytest.raises(anthropic.AuthenticationError) as e:
            anthropic.Anthropic(base_url=base_url(server), api_key="wrong", max_retries=0).messages.create(
                model=server.model_id, max_tokens=2, messages=Q)
        assert e.value.body["error"]["type"] == "authentication_error"
        r = post(server, {"model": server.model_id, "max_tokens": 2, "messages": Q}, **{"x-api-key": "s3cret"})
        assert r.status_code == 200 and r.json()["type"] == "message"
        anthropic_error(post(server, {"model": server.model_id, "max_tokens": 2, "messages": Q},
                             **{"x-api-key": "nope"}), 401, "authentication_error")
        for c in (anthropic.Anthropic(base_url=base_url(server), auth_token="s3cret", max_retries=0),  # Bearer
                  anthropic.Anthropic(base_url=base_url(server), api_key=None, max_retries=0,
                                      default_headers={"x-api-key": "s3cret"})):
            assert c.messages.create(model=server.model_id, max_tokens=2, messages=Q).type == "message"
        # OpenAI's routes take x-api-key too; their refusals keep OpenAI's shape.
        r = httpx.get(f"{server.url}/models", headers={"x-api-key": "s3cret"})
        assert r.status_code == 200
        assert httpx.get(f"{server.url}/models").json()["error"]["code"] == "invalid_api_key"
    finally:
        server.api_key = None


def test_a_full_queue_is_a_rate_limit_and_no_model_is_overloaded(engine):
    sched = Scheduler(engine, parallel=1, queue_limit=0)  # one request runs, none may wait
    srv = LocalServer(port=0)
    srv.attach(sched)
    srv.start()
    try:
        c = anthropic.Anthropic(base_url=base_url(srv), api_key="x", max_retries=0)
        blocker, rest = hold_one(sched)
        with pytest.raises(anthropic.RateLimitError) as e:
            c.messages.create(model=srv.model_id, max_tokens=2, messages=Q)
        assert int(e.value.response.headers["retry-after"]) >= 1
        assert e.value.body["error"]["type"] == "rate_limit_error"
        blocker.cancel()
        list(rest)
        srv.detach("a new model is loading")
        with pytest.raises(anthropic.OverloadedError, match="a new model is loading") as e2:
            c.messages.create(model="m", max_tokens=2, messages=Q)
        assert e2.value.status_code == 529 and e2.value.body["error"]["type"] == "overloaded_error"
        assert "POST /v1/messages" in httpx.get(f"{base_url(srv)}/v1/nothing").json()["error"]["message"]
    finally:
        srv.stop()
        sched.close()

"""The local OpenAI-compatible server, driven by real clients: the official
``openai`` package and plain ``httpx``, against a server on an ephemeral
127.0.0.1 port serving the bundled model through the real scheduler."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import openai
import pytest

from engine.errors import HearthError
from engine.serve.runtime.scheduler import Scheduler
from engine.serve.http.server import LocalServer
from engine.prompt.messages import Message
from engine.types import SamplingParams
from serving import hold_one

Q = [{"role": "user", "content": "What is the capital of France?"}]
LONG = [{"role": "user", "content": "Write a very long story about a dragon who learns to bake bread."}]


@pytest.fixture(scope="module")
def scheduler(engine):
    s = Scheduler(engine, parallel=2, queue_limit=8)
    yield s
    s.close()


@pytest.fixture(scope="module")
def server(scheduler):
    srv = LocalServer(port=0)
    srv.attach(scheduler)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def wait_for(cond, timeout_s: float = 60.0):
    """Poll ``cond`` until it holds (another thread finishes the work); its last value."""
    deadline = time.monotonic() + timeout_s
    while not (value := cond()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


def model(server) -> str:
    assert server.model_id is not None
    return server.model_id


def test_models_lists_the_loaded_model(client, server):
    ids = [m.id for m in client.models.list().data]
    assert ids == ["SmolLM2-135M-Instruct.Q4_1"] == [server.model_id]
    assert client.models.retrieve(server.model_id).id == server.model_id


def test_chat_reply_is_the_engines_greedy_reply(client, server, engine):
    r = client.chat.completions.create(model=model(server), messages=Q, max_tokens=10, temperature=0)
    text = r.choices[0].message.content
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 10 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # The scheduler is idle now: the same request in-process gives the same text.
    final = list(engine.stream([Message(**m) for m in Q], SamplingParams(temperature=0, max_tokens=10)))[-1]
    assert text == final.text and text


def test_stream_with_usage_and_cached_tokens_on_a_repeated_prompt(client, server):
    msgs = [{"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": "Name a colour of the sky at noon."}]
    usages, texts = [], []
    for _ in range(2):
        stream = client.chat.completions.create(model=model(server), messages=msgs, max_tokens=8, temperature=0,
                                                stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert all(c.usage is None for c in chunks[:-1])
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-2].choices[0].finish_reason in ("stop", "length")
        texts.append("".join(c.choices[0].delta.content or "" for c in chunks[:-1]))
        usages.append(chunks[-1].usage)
    assert texts[0] == texts[1] and texts[0]
    first, second = usages
    assert second.prompt_tokens == first.prompt_tokens
    # The second time the prompt's KV is reused: all of it but the last token.
    assert second.prompt_tokens_details.cached_tokens >= second.prompt_tokens // 2
    assert second.prompt_tokens_details.cached_tokens > first.prompt_tokens_details.cached_tokens
    assert second.completion_tokens == first.completion_tokens <= 8


def test_stop_seed_and_penalties_reach_the_engine(client, server):
    base = client.chat.completions.create(model=model(server), messages=Q, max_tokens=12, temperature=0)
    text = base.choices[0].message.content
    words = text.split()
    assert len(words) >= 3, text
    cut = text.index(words[2])  # the reply ends where the stop string first begins
    r = client.chat.completions.create(model=model(server), messages=Q, max_tokens=12, temperature=0,
                                       stop=[words[2]])
    assert r.choices[0].message.content == text[:cut] and r.choices[0].finish_reason == "stop"
    hot = dict(model=model(server), messages=Q, max_tokens=12, temperature=1.5, top_p=1.0, seed=1234,
               presence_penalty=0.5, frequency_penalty=0.5)
    a, b = (client.chat.completions.create(**hot).choices[0].message.content for _ in range(2))
    assert a == b  # the same seed draws the same tokens
    others = {client.chat.completions.create(**{**hot, "seed": seed}).choices[0].message.content
              for seed in (1, 2, 3)}
    assert len(others | {a}) > 1  # and the seed is used: other seeds draw other replies


def test_ignore_eos_decodes_past_the_end_of_the_reply_as_llama_server_does(client, server):
    sum_q = [{"role": "user", "content": "What is 2+2?"}]  # the bundled model answers it in a dozen tokens
    ended = client.chat.completions.create(model=model(server), messages=sum_q, max_tokens=60, temperature=0)
    assert ended.choices[0].finish_reason == "stop" and ended.usage.completion_tokens < 60
    on = client.chat.completions.create(model=model(server), messages=sum_q, max_tokens=60, temperature=0,
                                        extra_body={"ignore_eos": True})
    assert on.choices[0].finish_reason == "length" and on.usage.completion_tokens == 60
    assert on.choices[0].message.content.startswith(ended.choices[0].message.content)
    off = client.chat.completions.create(model=model(server), messages=sum_q, max_tokens=60, temperature=0,
                                         extra_body={"ignore_eos": False})
    assert off.choices[0].message.content == ended.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model(server), messages=Q, max_tokens=5, extra_body={"ignore_eos": "yes"})
    assert e.value.body["param"] == "ignore_eos" and "true or false" in e.value.body["message"]


def test_completions_endpoint(client, server):
    r = client.completions.create(model=model(server), prompt="The capital of France is", max_tokens=6,
                                  temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    assert r.usage.completion_tokens <= 6
    again = client.completions.create(model=model(server), prompt="The capital of France is", max_tokens=6,
                                      temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in again) == r.choices[0].text


def test_json_schema_output_parses_and_follows_the_schema(client, server):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                               "count": {"type": "integer"}},
              "required": ["answer", "count"], "additionalProperties": False}
    r = client.chat.completions.create(
        model=model(server), temperature=0, max_tokens=40,
        messages=[{"role": "user", "content": "Is Paris in France? Answer in JSON with a count of 3."}],
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
    data = json.loads(r.choices[0].message.content)
    assert set(data) == {"answer", "count"}
    assert data["answer"] in ("yes", "no") and isinstance(data["count"], int)
    r = client.chat.completions.create(
        model=model(server), temperature=0, max_tokens=60, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Reply with a JSON object with the keys city and country for Paris."}])
    assert r.choices[0].finish_reason == "stop"  # the grammar closed the object before max_tokens
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_errors_raise_the_right_openai_exceptions(client, server):
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=Q)
    with pytest.raises(openai.BadRequestError, match="max_tokens") as e:
        client.chat.completions.create(model=model(server), messages=Q, max_tokens=-5)
    assert e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError, match="context") as e:
        client.chat.completions.create(model=model(server), max_tokens=4,
                                       messages=[{"role": "user", "content": "word " * 5000}])
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError, match="schema") as e:
        client.chat.completions.create(model=model(server), messages=Q, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "bogus"}}})
    assert e.value.body["code"] == "invalid_schema"
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model=model(server), messages=Q, temperature=7)
    with pytest.raises(openai.BadRequestError, match="role"):
        client.chat.completions.create(model=model(server), messages=[{"role": "wizard", "content": "hi"}])
    # Still serving after every refusal.
    assert client.chat.completions.create(model=model(server), messages=Q, max_tokens=3,
                                          temperature=0).choices[0].message.content


def test_api_key(server):
    server.api_key = "s3cret-key"
    try:
        with pytest.raises(openai.AuthenticationError, match="API key"):
            openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0).models.list()
        r = httpx.get(f"{server.url}/models")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        ok = openai.OpenAI(base_url=server.url, api_key="s3cret-key", max_retries=0)
        assert ok.chat.completions.create(model=model(server), messages=Q, max_tokens=2,
                                          temperature=0).choices[0].message.content is not None
    finally:
        server.api_key = None


def test_sse_framing(server):
    body = {"model": model(server), "messages": Q, "max_tokens": 5, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    assert "\r" not in raw
    events = [e for e in raw.split("\n\n") if e and not e.startswith(":")]  # ":" lines are keep-alive pings
    assert raw.endswith("data: [DONE]\n\n") and events[-1] == "data: [DONE]"
    for e in events[:-1]:
        assert e.startswith("data: ") and "\n" not in e
        assert json.loads(e[len("data: "):])["object"] == "chat.completion.chunk"


def test_client_disconnect_cancels_the_request(server, scheduler):
    body = {"model": model(server), "messages": LONG, "max_tokens": 1500, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=120) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]  # a few chunks of the reply, then hang up
        assert all(not line or line.startswith("data: ") for line in got)
        ticket = next(iter(server.active_tickets()))
    assert ticket.wait(60), "the request was not cancelled after the client left"
    assert ticket.times.finish_reason == "cancelled"
    assert ticket.times.completion_tokens < 1500
    assert server.in_flight == 0
    assert wait_for(lambda: scheduler.stats()["running"] == scheduler.stats()["queued"] == 0), \
        "the scheduler did not free the request"


def test_client_leaving_a_non_streamed_request_cancels_it(server, scheduler):
    body = {"model": model(server), "messages": LONG, "max_tokens": 1500, "temperature": 0}
    before = set(server.finished)
    with pytest.raises(httpx.ReadTimeout):  # the client gives up long before 1500 tokens are written
        httpx.post(f"{server.url}/chat/completions", json=body, timeout=httpx.Timeout(120, read=0.5))
    # The server may still be reading the request on a busy machine.
    assert wait_for(lambda: (set(server.finished) | set(server.active_tickets())) - before)
    (ticket,) = (set(server.finished) | set(server.active_tickets())) - before
    assert ticket.wait(60), "the request was not cancelled after the client left"
    assert ticket.times.finish_reason == "cancelled" and ticket.times.completion_tokens < 1500
    assert wait_for(lambda: scheduler.stats()["running"] == 0), "the scheduler did not free the request"


def test_bad_requests_get_clear_4xx_and_the_server_keeps_working(server):
    url = f"{server.url}/chat/completions"
    r = httpx.post(url, content=b'{"model": "x", "messages": [', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(url, content=b"[1, 2]")
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
    r = httpx.post(url, content=b"x" * (40 << 20), timeout=60)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = httpx.get(f"{server.url}/models", headers={"Host": "attacker.example:%d" % server.port})
    assert r.status_code == 403 and "DNS rebinding" in r.json()["error"]["message"]
    r = httpx.post(url, json={"model": model(server), "messages": Q}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    r = httpx.get(f"{server.url}/engines")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.post(url, json={"model": model(server), "messages": Q, "stream_options": {"include_usage": True}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream_options"
    r = httpx.post(url, json={"model": model(server), "messages": Q, "max_tokens": 3, "temperature": 0},
                   headers={"Host": f"localhost:{server.port}"}, timeout=120)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]


def test_queue_full_is_429_with_retry_after(engine):
    s = Scheduler(engine, parallel=1, queue_limit=0)  # one API request runs, none may wait
    srv = LocalServer(port=0)
    srv.attach(s)
    srv.start()
    try:
        blocker, rest = hold_one(s)
        with pytest.raises(openai.RateLimitError) as e:
            openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0).chat.completions.create(
                model=model(srv), messages=Q, max_tokens=2)
        assert int(e.value.response.headers["retry-after"]) >= 1
        blocker.cancel()
        list(rest)
        srv.detach("a new model is loading")
        r = httpx.post(f"{srv.url}/chat/completions", json={"model": "m", "messages": Q})
        assert r.status_code == 503 and "a new model is loading" in r.json()["error"]["message"]
    finally:
        srv.stop()
        s.close()


def test_cors_allow_list_and_bind_host():
    with pytest.raises(HearthError, match="127.0.0.1 only"):
        LocalServer(host="0.0.0.0")
    srv = LocalServer(port=0, cors_origins=["http://localhost:3000"])
    srv.start()
    try:
        pre = httpx.options(f"{srv.url}/chat/completions", headers={
            "Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "http://localhost:3000"
        r = httpx.get(f"{srv.url}/models", headers={"Origin": "http://localhost:3000"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert r.json() == {"object": "list", "data": []}  # nothing attached yet
        assert httpx.get(f"{srv.url}/models", headers={"Origin": "http://other:1"}).status_code == 403
    finally:
        srv.stop()
    assert not srv.running


def test_headless_serve_answers_then_stops_on_ctrl_c(bundled_path):
    import signal

    from serving import assert_other_protocols

    p = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", str(bundled_path), "--port", "0",
                          "--parallel", "2", "--ctx", "1024", "--threads", "1", "--api-key", "k1", "--draft", "ngram"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("Hearth serving SmolLM2-135M-Instruct.Q4_1 at http://127.0.0.1:"), \
            line + p.stderr.read()
        url = line.split(" at ")[1].split(" ")[0].rstrip(";")
        c = openai.OpenAI(base_url=url, api_key="k1", max_retries=0, timeout=120)
        assert c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=Q, max_tokens=3,
                                         temperature=0).choices[0].message.content
        assert_other_protocols(url.removesuffix("/v1"), "k1", "SmolLM2-135M-Instruct.Q4_1")
        p.send_signal(signal.SIGINT)
        assert p.wait(60) == 0, p.stderr.read()[-8000:]  # a stuck shutdown exits 1 with every thread's stack
        assert "layers offloaded, speculation ngram" in p.stderr.read()  # --draft reached the engine
    finally:
        if p.poll() is None:
            p.kill()


def test_bench_server_smoke():
    """The overhead benchmark with tiny arguments: the three ways give the same reply's deltas."""
    import argparse

    from engine.bench import api_cost

    r = api_cost.bench_server(argparse.Namespace(model=None, ctx=1024, threads=1, rounds=1, tokens=8))
    assert r["deltas"]["in_process"] == r["deltas"]["scheduler"] == r["deltas"]["api_stream"] >= 2
    assert set(r["decode_deltas_per_s"]) == {"in_process", "scheduler", "api_stream"}
    assert r["ratio_api_stream"] > 0 and r["target_api_stream"] == 0.95


@pytest.mark.parametrize("stream", [False, True])
def test_a_repeated_prompt_is_read_from_the_batch_slots_it_left(engine, stream):
    """The server closes each request once its reply is out; that close must not wipe the KV the
    finished reply left in its slot. Before, every slot was emptied, so a repeated prompt (no
    system message) read 0 cached tokens on the batch path, whichever slot it landed in."""
    from serving import local_server

    with local_server(engine, parallel=4, queue_limit=8) as srv:
        c = openai.OpenAI(base_url=srv.url, api_key="unused", max_retries=0, timeout=120)
        msgs = [{"role": "user", "content": "Hello there, how are you today?"}]
        seen = []
        for _ in range(3):
            if stream:
                chunks = list(c.chat.completions.create(model=srv.model_id, messages=msgs, max_tokens=4,
                                                        temperature=0, stream=True,
                                                        stream_options={"include_usage": True}))
                u = chunks[-1].usage
            else:
                u = c.chat.completions.create(model=srv.model_id, messages=msgs, max_tokens=4, temperature=0).usage
            seen.append((u.prompt_tokens, u.prompt_tokens_details.cached_tokens))
        n = seen[0][0]
        assert seen[1:] == [(n, n - 1), (n, n - 1)], seen  # all of the prompt but the token that gives logits


def test_a_stuck_shutdown_shows_where_and_ends_the_process():
    # engine serve's Ctrl-C path runs its shutdown inside bounded_shutdown; here the work never ends.
    code = ("import time; from engine.cli.serve import bounded_shutdown\n"
            "with bounded_shutdown(0.5):\n    time.sleep(60)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "time.sleep(60)" not in p.stdout
    assert "Timeout" in p.stderr and "<module>" in p.stderr  # faulthandler's dump: where the main thread was
    done = subprocess.run([sys.executable, "-c", "import time; from engine.cli.serve import bounded_shutdown\n"
                           "with bounded_shutdown(0.5):\n    pass\ntime.sleep(1); print('ok')"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout == "ok\n"  # a shutdown that ends in time disarms it

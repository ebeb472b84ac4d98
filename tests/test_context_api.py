"""The context policies through the API and ``engine chat``, on the real bundled model.

Responses' ``truncation`` (auto / disabled), the same field on Chat Completions and Messages, and
Hearth's ``context_policy`` naming any of the four policies; without either a conversation too
long for the context is a 400, as the protocols say. ``engine chat`` takes ``--context-policy``,
says what to do when "stop" refuses a turn, and goes on with ``/policy``.
"""
from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from engine.config import EngineConfig
from engine.engine import Engine
from engine.errors import HearthError
from engine.prompt.messages import Message
from engine.serve.protocols.context import context_policy
from engine.serve.protocols.errors import ApiError
from engine.types import SamplingParams
from serving import local_server

TURN = "Tell me one short fact about the number {n}, and then another one about the number {m}, please."


def long_chat(turns: int = 14) -> list[dict]:
    out = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        out += [{"role": "user", "content": TURN.format(n=i, m=i + 1)},
                {"role": "assistant", "content": f"The number {i} comes before {i + 1}, which is not {i + 2}."}]
    return out + [{"role": "user", "content": "Thanks. What did we talk about?"}]


@pytest.fixture(scope="module")
def small(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=512, exactness="fast", cache_budget=0, context_policy="shift"))
    yield e
    e.close()


@pytest.fixture(scope="module")
def served(small):
    with local_server(small, parallel=1, queue_limit=4) as srv:
        yield srv


def post(srv, path: str, body: dict) -> httpx.Response:
    model = httpx.get(f"{srv.url}/models").json()["data"][0]["id"]
    return httpx.post(f"{srv.url}{path}", json={"model": model, **body}, timeout=300)


def test_the_request_names_its_policy_or_gets_the_protocols_default():
    assert context_policy({}) == "error"
    assert context_policy({"truncation": "auto"}) == "drop_oldest"
    assert context_policy({"truncation": "disabled"}) == "error"
    for name in ("stop", "drop_oldest", "shift", "compact"):
        assert context_policy({"context_policy": name}) == name
    for body, param in (({"truncation": "middle"}, "truncation"), ({"context_policy": "rolling"}, "context_policy"),
                        ({"truncation": "auto", "context_policy": "shift"}, "context_policy")):
        with pytest.raises(ApiError) as e:
            context_policy(body)
        assert e.value.status == 400 and e.value.param == param


def test_the_config_names_the_engines_own_default(bundled_path, small):
    with pytest.raises(HearthError, match="choose one of stop, drop_oldest, shift, compact"):
        EngineConfig(bundled_path, context_policy="rolling")
    msgs = [Message.from_dict(m) for m in long_chat()]
    f = list(small.stream(msgs, SamplingParams(temperature=0, max_tokens=4)))[-1]
    assert f.stats.context_policy == "shift" and f.stats.dropped_messages > 0


def test_chat_completions_errors_by_default_and_fits_on_request(served):
    r = post(served, "/chat/completions", {"messages": long_chat(), "max_tokens": 8})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    for body in ({"truncation": "auto"}, {"context_policy": "shift"}, {"context_policy": "compact"}):
        r = post(served, "/chat/completions", {"messages": long_chat(), "max_tokens": 8, "temperature": 0, **body})
        assert r.status_code == 200, (body, r.text)
        assert r.json()["choices"][0]["message"]["content"]
        assert r.json()["usage"]["prompt_tokens"] < 512
    r = post(served, "/chat/completions", {"messages": long_chat(), "truncation": "sometimes"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "truncation"


def test_responses_truncation_auto_and_disabled(served):
    items = long_chat()
    body = {"instructions": items[0]["content"], "input": items[1:], "max_output_tokens": 8, "temperature": 0}
    r = post(served, "/responses", body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = post(served, "/responses", {**body, "truncation": "auto"})
    assert r.status_code == 200, r.text
    assert r.json()["truncation"] == "auto" and r.json()["status"] in ("completed", "incomplete")
    short = post(served, "/responses", {"input": "Hi", "max_output_tokens": 4})
    assert short.json()["truncation"] == "disabled"


def test_messages_take_the_same_fields(served):
    items = long_chat()
    body = {"system": items[0]["content"], "messages": items[1:], "max_tokens": 8, "temperature": 0}
    r = post(served, "/messages", body)
    assert r.status_code == 400
    for extra in ({"truncation": "auto"}, {"context_policy": "shift"}):
        r = post(served, "/messages", {**body, **extra})
        assert r.status_code == 200, r.text
        assert r.json()["content"][0]["text"]


def test_engine_chat_says_how_to_go_on_when_stop_refuses(bundled_path):
    lines = [TURN.format(n=i, m=i + 1) * 2 for i in range(6)]
    typed = "\n".join([*lines, "/policy", "/policy compact", lines[-1]]) + "\n"
    r = subprocess.run([sys.executable, "-m", "engine", "chat", "--temp", "0", "--max-tokens", "12", "--ctx", "256",
                        "--draft", "none", "--context-policy", "stop"],
                       input=typed, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "/policy drop_oldest, shift or compact goes on without the oldest messages" in r.stderr
    assert "(context policy: stop;" in r.stderr and "(context policy: compact)" in r.stderr
    assert "summarizing the oldest messages to fit the context..." in r.stderr
    assert "summary of the oldest messages: " in r.stderr
    assert "oldest messages summarized to fit the context" in r.stderr

"""The local server's answers to hostile bodies and to its own bugs: always JSON in the
protocol's error shape, never Starlette's plain-text 500, and a bug's traceback in the log."""
from __future__ import annotations

import json
import logging

import httpx
import pytest

from engine.serve.protocols.openai import Shaper
from engine.serve.http.server import LocalServer
from serving import local_server

Q = [{"role": "user", "content": "Hi"}]
OPENAI_ERROR = {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def bare():
    """A server with no model: every body is read and checked before the model is asked for."""
    srv = LocalServer(port=0)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def served(engine):
    with local_server(engine, parallel=1, queue_limit=4) as srv:
        yield srv


def nested(n: int) -> str:
    return "[" * n + "]" * n


def post(srv, raw: str | bytes, path: str = "/chat/completions") -> httpx.Response:
    return httpx.post(f"{srv.url}{path}", content=raw, headers={"content-type": "application/json"}, timeout=60)


def openai_error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert set(err) == OPENAI_ERROR and err["message"]
    return err


@pytest.mark.parametrize("where", ["bare", "messages", "message", "content", "role", "temperature", "stop"])
@pytest.mark.parametrize("n", [10_000, 900, 65])
def test_deeply_nested_bodies_are_a_400_wherever_they_nest(bare, where, n):
    deep = nested(n)
    head = '{"model": "m", '
    raw = {"bare": deep,
           "messages": head + f'"messages": {deep}}}',
           "message": head + f'"messages": [{deep}]}}',
           "content": head + f'"messages": [{{"role": "user", "content": {deep}}}]}}',
           "role": head + f'"messages": [{{"role": {deep}, "content": "hi"}}]}}',
           "temperature": head + f'"messages": {json.dumps(Q)}, "temperature": {deep}}}',
           "stop": head + f'"messages": {json.dumps(Q)}, "stop": {deep}}}'}[where]
    err = openai_error(post(bare, raw), 400)
    assert err["code"] == "invalid_json" and "nests more than 64 levels" in err["message"]
    assert len(err["message"]) < 200  # nothing of the value is echoed back


def test_values_of_the_wrong_type_are_named_not_crashed_on(bare):
    # A role that is a list was a TypeError (unhashable) and Starlette's plain 500.
    for role in (["user"], {"a": 1}, nested(10), 5):
        body = f'{{"model": "m", "messages": [{{"role": {json.dumps(role)}, "content": "hi"}}]}}'
        err = openai_error(post(bare, body), 400)
        assert err["param"] == "messages[0].role"
    err = openai_error(post(bare, json.dumps({"model": "m", "messages": Q, "temperature": "x" * 100_000})), 400)
    assert err["param"] == "temperature" and len(err["message"]) < 200
    # Just under the limit is read: the refusal is about the field, not the nesting.
    err = openai_error(post(bare, f'{{"model": "m", "messages": {json.dumps(Q)}, "stop": {nested(60)}}}'), 400)
    assert err["param"] == "stop"
    # With no model, a well-formed request is a 503 (the body was fine).
    openai_error(post(bare, json.dumps({"model": "m", "messages": Q})), 503)


def _logged(caplog, needle: str) -> logging.LogRecord:
    recs = [r for r in caplog.records if r.name == "hearth.serve" and r.exc_info]
    assert recs, "the bug was not logged"
    assert any(needle in logging.Formatter().formatException(r.exc_info) for r in recs)
    return recs[-1]


def test_a_bug_in_a_route_is_a_json_500_and_its_traceback_is_logged(served, monkeypatch, caplog):
    def boom(*_a, **_k):
        raise RuntimeError("kaboom in the route")

    caplog.set_level(logging.ERROR, logger="hearth.serve")
    monkeypatch.setattr(served.targets, "lease", boom)
    r = httpx.post(f"{served.url}/chat/completions", json={"model": served.model_id, "messages": Q, "max_tokens": 2})
    err = openai_error(r, 500)
    assert err["type"] == "server_error" and "RuntimeError: kaboom in the route" in err["message"]
    rec = _logged(caplog, "kaboom in the route")
    assert "POST /v1/chat/completions" in rec.getMessage()
    monkeypatch.setattr(served.targets, "cards", boom)
    err = openai_error(httpx.get(f"{served.url}/models"), 500)
    assert err["type"] == "server_error"
    monkeypatch.undo()
    r = httpx.post(f"{served.url}/chat/completions", json={"model": served.model_id, "messages": Q,
                                                           "max_tokens": 2, "temperature": 0}, timeout=120)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None


def test_a_bug_inside_a_stream_ends_it_with_an_error_event_and_is_logged(served, monkeypatch, caplog):
    def boom(*_a, **_k):
        raise KeyError("usage went missing")

    caplog.set_level(logging.ERROR, logger="hearth.serve")
    monkeypatch.setattr(Shaper, "usage_chunk", boom)
    body = {"model": served.model_id, "messages": Q, "max_tokens": 3, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{served.url}/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        events = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    err = json.loads(events[-2])["error"]
    assert set(err) == OPENAI_ERROR and err["type"] == "server_error" and "usage went missing" in err["message"]
    _logged(caplog, "usage went missing")
    assert served.in_flight == 0

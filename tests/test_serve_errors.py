"""The local server's answers to hostile bodies: always JSON in the protocol's error shape,
never Starlette's plain-text 500."""
from __future__ import annotations

import json

import httpx
import pytest

from engine.serve.server import LocalServer

Q = [{"role": "user", "content": "Hi"}]
OPENAI_ERROR = {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def bare():
    """A server with no model: every body is read and checked before the model is asked for."""
    srv = LocalServer(port=0)
    srv.start()
    yield srv
    srv.stop()


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

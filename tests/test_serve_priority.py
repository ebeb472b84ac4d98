"""An API request's place in the engine core's queue: its ``priority`` (vLLM's field, on every
generating endpoint), its key's default, and the longest it may wait (then 503 with Retry-After).

Driven by the official ``openai`` and ``anthropic`` clients against the bundled model through the
real scheduler and engine core; priority fields travel as clients send such fields (``extra_body``).
"""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager

import anthropic
import httpx
import openai
import pytest

from engine.core.job import Priority
from engine.serve.http.keys import KeyRing
from engine.serve.http.server import LocalServer
from engine.serve.protocols.errors import ApiError
from engine.serve.protocols.scheduling import priority_class
from engine.serve.runtime.scheduler import Scheduler
from serving import hold_one

Q = [{"role": "user", "content": "What is the capital of France?"}]


@contextmanager
def serving(engine, *, parallel: int = 2, **server_kw):
    sched = Scheduler(engine, parallel=parallel, queue_limit=8)
    srv = LocalServer(port=0, **server_kw)
    srv.attach(sched)
    srv.start()
    try:
        yield srv, sched
    finally:
        srv.stop()
        sched.close()


@pytest.fixture(scope="module")
def server(engine):
    with serving(engine) as (srv, _sched):
        yield srv


def oai(srv, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url, api_key=key, max_retries=0, timeout=120)


def claude(srv, key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", api_key=key, max_retries=0, timeout=120)


def last_priority(srv) -> Priority:
    return srv.finished[-1].request.priority


# -- the field ------------------------------------------------------------------------------------


def test_a_priority_maps_onto_the_cores_classes_as_vllm_orders_them():
    # vLLM: lower is more urgent, 0 by default. Hearth's API classes: interactive, then background.
    for v in (0, -1, -(1 << 63), "interactive", "Interactive", " interactive "):
        assert priority_class(v) == Priority.INTERACTIVE, v
    for v in (1, 7, (1 << 63) - 1, "background", "BACKGROUND"):
        assert priority_class(v) == Priority.BACKGROUND, v
    for v in (True, False, 1.5, 0.0, "urgent", "window", "", 1 << 63, -(1 << 63) - 1, [0], {"class": 0}):
        with pytest.raises(ApiError) as e:
            priority_class(v)
        assert e.value.status == 400 and e.value.param == "priority", v
        assert "lower is more urgent" in e.value.message or "64-bit" in e.value.message


def test_every_endpoint_takes_a_priority_and_a_request_without_one_is_interactive(server):
    o, a, m = oai(server), claude(server), server.model_id
    o.chat.completions.create(model=m, messages=Q, max_tokens=2, temperature=0)
    assert last_priority(server) == Priority.INTERACTIVE
    o.chat.completions.create(model=m, messages=Q, max_tokens=2, temperature=0, extra_body={"priority": 5})
    assert last_priority(server) == Priority.BACKGROUND
    o.completions.create(model=m, prompt="Paris is", max_tokens=2, extra_body={"priority": "background"})
    assert last_priority(server) == Priority.BACKGROUND
    o.responses.create(model=m, input="Hi", max_output_tokens=2, extra_body={"priority": -3})
    assert last_priority(server) == Priority.INTERACTIVE
    a.messages.create(model=m, max_tokens=2, messages=Q, extra_body={"priority": 1})
    assert last_priority(server) == Priority.BACKGROUND
    list(o.chat.completions.create(model=m, messages=Q, max_tokens=2, stream=True, extra_body={"priority": 2}))
    assert last_priority(server) == Priority.BACKGROUND


def test_a_malformed_priority_is_a_400_naming_the_field_on_every_endpoint(server):
    o, a, m = oai(server), claude(server), server.model_id
    served = server.served
    for bad in ("urgent", 1.5, True, [1]):
        with pytest.raises(openai.BadRequestError) as e:
            o.chat.completions.create(model=m, messages=Q, max_tokens=2, extra_body={"priority": bad})
        assert e.value.body["param"] == "priority" and e.value.body["code"] == "invalid_priority"
    with pytest.raises(openai.BadRequestError) as e:
        o.completions.create(model=m, prompt="Hi", max_tokens=2, extra_body={"priority": "soon"})
    assert e.value.body["param"] == "priority"
    with pytest.raises(openai.BadRequestError) as e:
        o.responses.create(model=m, input="Hi", max_output_tokens=2, extra_body={"priority": 1 << 64})
    assert e.value.body["param"] == "priority" and "64-bit" in e.value.body["message"]
    with pytest.raises(anthropic.BadRequestError) as e2:
        a.messages.create(model=m, max_tokens=2, messages=Q, extra_body={"priority": "now"})
    assert e2.value.body["error"]["type"] == "invalid_request_error" and "priority" in e2.value.body["error"]["message"]
    assert server.served == served  # nothing was generated for any of them


def test_an_interactive_request_overtakes_a_background_one_waiting_before_it(engine):
    # One sequence for the API, held; a background request queues, then an interactive one: when the
    # sequence frees, the interactive one runs first (within a class, the one that came first would).
    def ask(name: str, priority: int | str) -> None:
        oai(srv).chat.completions.create(model=srv.model_id, messages=Q, max_tokens=3, temperature=0,
                                         extra_body={"priority": priority})
        done.append(name)

    def queued(cls: Priority) -> bool:
        return any(r["priority"] == cls and r["state"] == "queued" for r in engine.core.requests())

    done: list[str] = []
    # No aging while this runs (it would lift the background request after 15 s on a slow machine);
    # tests/test_core.py shows aging itself.
    aging, engine.core.stepper.aging_s = engine.core.stepper.aging_s, 1e6
    try:
        with serving(engine, parallel=1) as (srv, sched):
            blocker, rest = hold_one(sched)
            asks = [threading.Thread(target=ask, args=("background", 10)),
                    threading.Thread(target=ask, args=("interactive", "interactive"))]
            try:
                asks[0].start()
                assert wait_until(lambda: queued(Priority.BACKGROUND))
                asks[1].start()
                assert wait_until(lambda: queued(Priority.INTERACTIVE))
            finally:
                blocker.cancel()
                list(rest)
                for t in asks:
                    if t.ident is not None:  # started
                        t.join(120)
    finally:
        engine.core.stepper.aging_s = aging
    assert done == ["interactive", "background"]


def wait_until(cond, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# -- the longest wait -------------------------------------------------------------------------------


def test_a_request_that_waits_past_the_maximum_gets_503_with_retry_after(engine):
    with serving(engine, parallel=1, max_queue_wait=0.3) as (srv, sched):
        blocker, rest = hold_one(sched)
        try:
            o, m = oai(srv), srv.model_id
            with pytest.raises(openai.InternalServerError) as e:
                o.chat.completions.create(model=m, messages=Q, max_tokens=2)
            assert e.value.status_code == 503 and int(e.value.response.headers["retry-after"]) >= 1
            assert e.value.body["code"] == "queue_timeout" and e.value.body["type"] == "server_error"
            assert "gave up" in e.value.body["message"]
            with pytest.raises(openai.InternalServerError) as e:  # streamed: refused before the stream starts
                o.chat.completions.create(model=m, messages=Q, max_tokens=2, stream=True)
            assert e.value.status_code == 503 and "retry-after" in e.value.response.headers
            with pytest.raises(openai.InternalServerError) as e:
                o.responses.create(model=m, input="Hi", max_output_tokens=2)
            assert e.value.status_code == 503
            # Anthropic's API says it as 529 overloaded_error, which its clients retry after Retry-After.
            with pytest.raises(anthropic.OverloadedError) as e2:
                claude(srv).messages.create(model=m, max_tokens=2, messages=Q)
            assert e2.value.status_code == 529 and e2.value.body["error"]["type"] == "overloaded_error"
            assert int(e2.value.response.headers["retry-after"]) >= 1
            assert next(rest).kind == "delta"  # the request holding the model never noticed
        finally:
            blocker.cancel()
            list(rest)
        # With the model free the same request is answered; and the client's own retry gets there too.
        r = oai(srv).chat.completions.create(model=srv.model_id, messages=Q, max_tokens=2)
        assert r.choices[0].message.content is not None
        assert [t.times.finish_reason for t in srv.finished][-5:-1] == ["error"] * 4


def test_the_maximum_wait_is_the_servers_and_zero_means_none(engine):
    with serving(engine, parallel=1, max_queue_wait=0) as (srv, sched):
        blocker, rest = hold_one(sched)
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(oai(srv).chat.completions.create(
            model=srv.model_id, messages=Q, max_tokens=2)))
        waiter.start()
        assert wait_until(lambda: any(r["state"] == "queued" for r in engine.core.requests()))
        time.sleep(1.0)  # well past the 0.3 s above: no limit, it is still waiting
        assert not got and waiter.is_alive()
        blocker.cancel()
        list(rest)
        waiter.join(120)
        assert got and got[0].choices[0].finish_reason in ("stop", "length")
        assert srv.finished[-1].request.max_wait_s is None
    with serving(engine) as (srv, _sched):
        assert srv.max_queue_wait == 120  # the default, as `engine serve --max-queue-wait`
        oai(srv).chat.completions.create(model=srv.model_id, messages=Q, max_tokens=1)
        assert srv.finished[-1].request.max_wait_s == 120


def test_engine_serve_takes_max_queue_wait_and_refuses_a_negative_one():
    from engine.cli import build_parser
    from engine.errors import HearthError

    assert build_parser().parse_args(["serve"]).max_queue_wait == 120
    assert build_parser().parse_args(["serve", "--max-queue-wait", "2.5"]).max_queue_wait == 2.5
    with pytest.raises(HearthError, match="longest queue wait is 0"):
        LocalServer(port=0, max_queue_wait=-1)


# -- a key's default ----------------------------------------------------------------------------------


def test_a_device_keys_priority_is_the_default_of_its_requests(engine, tmp_path):
    ring = KeyRing(tmp_path / "keys.json")
    _phone, phone_key = ring.create("phone")
    batch, batch_key = ring.create("nightly batch", "background")
    with serving(engine, api_key="settings-key", keys=ring) as (srv, _sched):
        m = srv.model_id
        oai(srv, batch_key).chat.completions.create(model=m, messages=Q, max_tokens=1)
        assert last_priority(srv) == Priority.BACKGROUND and srv.finished[-1].request.label == "nightly batch"
        oai(srv, batch_key).chat.completions.create(model=m, messages=Q, max_tokens=1, extra_body={"priority": 0})
        assert last_priority(srv) == Priority.INTERACTIVE  # the request's own field wins
        claude(srv, batch_key).messages.create(model=m, max_tokens=1, messages=Q)
        assert last_priority(srv) == Priority.BACKGROUND
        oai(srv, phone_key).chat.completions.create(model=m, messages=Q, max_tokens=1)
        assert last_priority(srv) == Priority.INTERACTIVE and srv.finished[-1].request.label == "phone"
        oai(srv, "settings-key").chat.completions.create(model=m, messages=Q, max_tokens=1)
        assert last_priority(srv) == Priority.INTERACTIVE
        ring.set_priority(batch.id, "interactive")  # a running server reads the change at the next request
        oai(srv, batch_key).chat.completions.create(model=m, messages=Q, max_tokens=1)
        assert last_priority(srv) == Priority.INTERACTIVE


def test_the_key_ring_keeps_each_keys_priority_and_reads_older_files(tmp_path):
    from engine.errors import HearthError

    ring = KeyRing(tmp_path / "keys.json")
    a, _ = ring.create("laptop")
    b, _ = ring.create("batch", "background")
    assert (a.priority, b.priority) == ("interactive", "background")
    assert [e.priority for e in KeyRing(ring.path).entries()] == ["interactive", "background"]
    assert ring.set_priority(a.id, "background").priority == "background"
    assert [e.priority for e in KeyRing(ring.path).entries()] == ["background", "background"]
    with pytest.raises(HearthError, match="interactive, background"):
        ring.create("x", "window")  # the window's class is the app's alone
    with pytest.raises(HearthError, match="interactive, background"):
        ring.set_priority(a.id, "urgent")
    with pytest.raises(HearthError, match="no key"):
        ring.set_priority("nope", "background")
    # A file written before keys had a priority: each key's requests are interactive.
    rows = json.loads(ring.path.read_text())
    for r in rows:
        del r["priority"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(rows))
    assert [e.priority for e in KeyRing(old).entries()] == ["interactive", "interactive"]
    rows[0]["priority"] = "urgent"
    old.write_text(json.dumps(rows))
    with pytest.raises(HearthError, match="damaged"):
        KeyRing(old).entries()


def test_engine_keys_makes_lists_and_sets_a_keys_priority(data_dir, capsys):
    from engine.cli import main
    from engine.serve.http.listen import key_ring

    assert main(["keys", "new", "batch", "--priority", "background"]) == 0
    key = capsys.readouterr().out.strip()
    (entry,) = key_ring(data_dir).entries()
    assert key_ring(data_dir).match(key) == entry and entry.priority == "background"
    assert main(["keys", "list"]) == 0
    listed = capsys.readouterr().out
    assert entry.id in listed and "background" in listed and "batch" in listed
    assert main(["keys", "set", entry.id, "--priority", "interactive"]) == 0
    assert key_ring(data_dir).entries()[0].priority == "interactive"
    assert main(["keys", "set", entry.id]) == 2 and "--priority" in capsys.readouterr().err
    assert main(["keys", "list", "--priority", "background"]) == 2
    assert "goes with `keys new` or `keys set`" in capsys.readouterr().err


def test_a_priority_through_raw_http_reaches_the_core(server):
    # Plain JSON, as curl sends it: the class name works as well as the number.
    r = httpx.post(f"{server.url}/chat/completions", timeout=120, json={
        "model": server.model_id, "messages": Q, "max_tokens": 1, "priority": "background"})
    assert r.status_code == 200 and last_priority(server) == Priority.BACKGROUND

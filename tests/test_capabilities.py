"""What each engine says it can do (engine/interface.py's Capabilities), checked against what it does:
llama.cpp on the bundled model, transformers on a tiny random model, a remote engine on a real local
Hearth server and on one that cannot count tokens, and what a split model's child process says as it
crosses to the parent. The engine interface stays narrow (ChatEngine's five members), and each engine
offers exactly the optional protocols its capabilities claim (the split engine: tests/test_workers.py)."""
from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest

from engine import Message, SamplingParams
from engine.interface import (OPTIONAL, Capabilities, ChatEngine, ModelInfo, continue_text, count_image_tokens,
                              plan_tools, scheduling)
from engine.reply_formats import ThinkControl
from engine.reply_formats.tools import Tool
from engine.remote.connect import open_remote
from engine.remote.pins import MemoryPins
from tests.serving import local_server

ASK = [Message("system", "You are brief."), Message("user", "Name three colours.")]
LOCAL = dict(schedules=True, completion=True, tools=True)  # the local engine's optional protocols


def assert_narrow(engine, lacks: tuple[str, ...] = ()) -> None:
    """``engine`` fills the engine interface and has every optional protocol its capabilities claim; those
    named in ``lacks`` it neither claims nor has (the local engine keeps an image count that says
    NoVisionError without a projector, so methods alone are no claim)."""
    assert isinstance(engine, ChatEngine)
    caps = engine.capabilities()
    assert engine.describe().capabilities == caps
    for claim, protocol in OPTIONAL.items():
        if getattr(caps, claim):
            assert isinstance(engine, protocol), (claim, protocol.__name__)
    for claim in lacks:
        assert not getattr(caps, claim) and not isinstance(engine, OPTIONAL[claim]), claim


SERVERS_OWN = ("schedules", "completion", "image_tokens")  # a server's model: its queue, its raw text, its count


def test_the_engine_interface_has_at_most_five_members():
    members = {n for n in vars(ChatEngine) if not n.startswith("_")}
    assert members == {"stream", "count_tokens", "describe", "capabilities", "close"}


def test_a_claimed_protocol_that_is_missing_is_said_at_once():
    class Liar:
        def capabilities(self):
            return Capabilities(schedules=True)

    with pytest.raises(TypeError, match="claims schedules"):
        scheduling(Liar())  # type: ignore[arg-type]


def test_the_llama_engine_counts_exactly_batches_and_runs_here(engine):
    m = engine.describe()
    assert m.capabilities == Capabilities(exact_tokens=True, images=False, think=engine.think is not None,
                                          batching=True, tunable=True, runs="here", **LOCAL)
    assert not m.sees_images and not m.capabilities.on_server
    assert engine.count_tokens(ASK) == len(engine.prompt_tokens(ASK))  # exact: the model's own tokenizer
    assert_narrow(engine)
    assert m.local is not None and m.local.memory_total > 0 and m.think == engine.think and m.n_ctx == engine.n_ctx
    assert scheduling(engine) is engine and count_image_tokens(engine, b"") is None  # no projector: none counted


def test_the_transformers_engine_counts_exactly_and_serves_one_request_at_a_time(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_hf import make_tiny_model

    from engine.config import EngineConfig
    from engine.engine import Engine

    eng = Engine.open(EngineConfig(str(make_tiny_model(tmp_path / "tiny")), n_ctx=512, cache_budget=0))
    try:
        m = eng.describe()
        assert m.backend == "hf"
        assert m.capabilities == Capabilities(exact_tokens=True, images=False, think=False, batching=False,
                                              tunable=True, runs="here", **LOCAL)
        assert eng.count_tokens(ASK) == len(eng.prompt_tokens(ASK))
        assert_narrow(eng)  # one sequence, but its own queue: the scheduler reads its figures
        assert scheduling(eng) is eng and eng.capacity() == 1
    finally:
        eng.close()


def test_a_remote_hearth_counts_exactly_sends_images_and_leaves_the_rest_to_its_server(engine):
    with local_server(engine) as srv:
        eng = open_remote(srv.url, pins=MemoryPins())
        try:
            m = eng.describe()
            assert m.capabilities == Capabilities(exact_tokens=True, images=True, think=False, batching=False,
                                                  tunable=False, runs="server", tools=True)
            assert m.capabilities.on_server and m.sees_images and m.local is None  # no backend of its own here
            assert m.think is None and m.n_ctx == engine.n_ctx  # the bundled model's template has no Think control
            assert eng.count_tokens(ASK) == engine.count_tokens(ASK)  # the server's own count (its count route)
            assert_narrow(eng, lacks=SERVERS_OWN)
            assert scheduling(eng) is None and count_image_tokens(eng, b"") is None  # its server's queue and count
            assert plan_tools(eng, [Tool("now")]).syntax.name.startswith("openai")  # OpenAI's, for the server to parse
        finally:
            eng.close()


def test_a_remote_server_that_cannot_count_says_its_counts_are_estimates():
    from openai_script import ScriptServer

    script = ScriptServer([], ["Hi"])
    try:
        eng = open_remote(script.url, pins=MemoryPins())
        assert eng.describe().capabilities == Capabilities(exact_tokens=False, images=True, think=False,
                                                           batching=False, tunable=False, runs="server", tools=True)
        assert_narrow(eng, lacks=SERVERS_OWN)
    finally:
        script.close()


def test_what_a_child_process_loaded_crosses_as_json_with_its_capabilities(engine):
    think = ThinkControl("switch", "enable_thinking", (True, False), True)
    for m in (engine.describe(), replace(engine.describe(), think=think, local=None)):
        back = ModelInfo.from_dict(json.loads(json.dumps(asdict(m))))  # the HEARTH-LOADED line's round trip
        assert back == m and isinstance(back.capabilities, Capabilities)
    assert back.think == think and back.local is None


def test_the_scheduler_serves_a_remote_model_through_the_narrow_interface(engine):
    """A server's model has no queue here (it counts as one at a time) and no raw-text continuation of its
    own: a prompt goes as one user turn, as the chat API takes it."""
    from engine.serve.runtime.requests import ServeRequest
    from engine.serve.runtime.scheduler import Scheduler

    with local_server(engine) as srv:
        eng = open_remote(srv.url, pins=MemoryPins())
        sched = Scheduler(eng, parallel=4, window=False)
        try:
            assert not sched.batching and sched.think is None and sched.n_ctx == engine.n_ctx
            params = SamplingParams(temperature=0.0, max_tokens=4)
            final = list(sched.submit(ServeRequest(prompt="Name three colours.", params=params)).events())[-1]
            direct = list(continue_text(eng, "Name three colours.", params))[-1]
            assert final.kind == "final" and final.text == direct.text != ""
            assert srv.finished[-1].request.messages[-1].content == "Name three colours."  # a user turn
            stats = sched.stats()
            assert (stats["batching"], stats["kv_capacity_tokens"]) == (False, 0)
        finally:
            sched.close()
            eng.close()


def test_a_place_to_run_that_is_not_one_of_the_three_is_refused():
    with pytest.raises(ValueError, match="runs"):
        Capabilities(runs="remote")


def test_a_stored_reply_from_a_server_is_told_by_its_metrics_not_by_the_app(engine):
    from app.core.text_utils import metrics_line
    from engine.decode.metrics import from_server

    with local_server(engine) as srv:
        eng = open_remote(srv.url, pins=MemoryPins())
        try:
            final = list(eng.stream(ASK, SamplingParams(temperature=0.0, max_tokens=4)))[-1]
        finally:
            eng.close()
    here = list(engine.stream(ASK, SamplingParams(temperature=0.0, max_tokens=4)))[-1].stats.as_dict()
    there = final.stats.as_dict()  # as the store keeps them
    assert from_server(there) and not from_server(here)
    assert metrics_line(there).endswith("on its server") and not metrics_line(here).endswith("on its server")

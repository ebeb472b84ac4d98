"""What each engine says it can do (engine/interface.py's Capabilities), checked against what it does:
llama.cpp on the bundled model, transformers on a tiny random model, a remote engine on a real local
Hearth server and on one that cannot count tokens, and what a split model's child process says as it
crosses to the parent."""
from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from engine import Message, SamplingParams
from engine.interface import Capabilities, LoadedModel
from engine.remote.connect import open_remote
from engine.remote.pins import MemoryPins
from tests.serving import local_server

ASK = [Message("system", "You are brief."), Message("user", "Name three colours.")]


def test_the_llama_engine_counts_exactly_batches_and_runs_here(engine):
    m = engine.describe()
    assert m.capabilities == Capabilities(exact_tokens=True, images=False, think=engine.think is not None,
                                          batching=True, tunable=True, runs="here")
    assert not m.sees_images and not m.capabilities.on_server
    assert engine.count_tokens(ASK) == len(engine.prompt_tokens(ASK))  # exact: the model's own tokenizer


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
                                              tunable=True, runs="here")
        assert eng.count_tokens(ASK) == len(eng.prompt_tokens(ASK))
    finally:
        eng.close()


def test_a_remote_hearth_counts_exactly_sends_images_and_leaves_the_rest_to_its_server(engine):
    with local_server(engine) as srv:
        eng = open_remote(srv.url, pins=MemoryPins())
        try:
            m = eng.describe()
            assert m.capabilities == Capabilities(exact_tokens=True, images=True, think=False, batching=False,
                                                  tunable=False, runs="server")
            assert m.capabilities.on_server and m.sees_images and m.projector is None  # no file of its own here
            assert eng.think is None and eng.capacity() == 1  # the bundled model's template has no Think control
            assert eng.count_tokens(ASK) == engine.count_tokens(ASK)  # the server's own count (its count route)
        finally:
            eng.close()


def test_a_remote_server_that_cannot_count_says_its_counts_are_estimates():
    from openai_script import ScriptServer

    script = ScriptServer([], ["Hi"])
    try:
        eng = open_remote(script.url, pins=MemoryPins())
        assert eng.describe().capabilities == Capabilities(exact_tokens=False, images=True, think=False,
                                                           batching=False, tunable=False, runs="server")
    finally:
        script.close()


def test_what_a_child_process_loaded_crosses_as_json_with_its_capabilities(engine):
    m = engine.describe()
    back = LoadedModel.from_dict(json.loads(json.dumps(asdict(m))))  # the HEARTH-LOADED line's round trip
    assert back == m and isinstance(back.capabilities, Capabilities)


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

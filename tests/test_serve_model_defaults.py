"""What an API request leaves out comes from its model's settings (Hearth's defaults < the model's
recommendation < yours for the model), the request's own fields on top; GET /v1/models/{id} shows them.
Real clients against a real server on a copy of the bundled model carrying general.sampling keys; checked
on the SamplingParams the scheduler is given."""
from __future__ import annotations

from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from engine.config import EngineConfig
from engine.engine import Engine
from engine.library.model_defaults import ServedDefaults
from engine.library.model_store import ModelEntry, ModelStore, model_key
from engine.serve.http.server import LocalServer
from engine.serve.runtime.scheduler import Scheduler
from gguf_copy import QWEN3_SAMPLING, with_metadata

ASK = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def model_file(bundled_path, tmp_path_factory):
    return with_metadata(Path(bundled_path), tmp_path_factory.mktemp("api") / "qwen3-like.gguf", QWEN3_SAMPLING)


@pytest.fixture(scope="module")
def served(model_file, tmp_path_factory):
    """(server, the ModelStore its defaults read, the SamplingParams each request was given)."""
    folder = tmp_path_factory.mktemp("store")
    store = ModelStore(folder / "model-settings.json")
    key = model_key("gguf", str(model_file), folder)
    store.save({key: ModelEntry(model_file.name, {"top_k": 7, "max_tokens": 3, "stop": ["zzz"]})})
    defaults = ServedDefaults(hearth=lambda: {"presence_penalty": 0.5}, entries=lambda: store.load()[0], memo=folder)
    engine = Engine.open(EngineConfig(model_file, n_ctx=2048, n_threads=2))
    sched = Scheduler(engine, parallel=2)
    given = []
    submit = sched.submit
    sched.submit = lambda req: given.append(req.params) or submit(req)  # the real scheduler, its input recorded
    srv = LocalServer(port=0, defaults=defaults)
    srv.attach(sched)
    srv.start()
    yield srv, store, key, given
    srv.stop()
    sched.close()
    engine.close()


def test_a_request_that_leaves_settings_out_gets_the_model_s(served):
    srv, _store, _key, given = served
    client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
    r = client.chat.completions.create(model=srv.model_id, messages=ASK)
    p = given[-1]
    assert (p.temperature, p.top_p, p.penalty_last_n, p.repeat_penalty) == (0.6, 0.95, 128, 1.05)  # the model's
    assert (p.top_k, p.max_tokens, p.stop) == (7, 3, ("zzz",))  # yours for the model
    assert p.presence_penalty == 0.5 and p.min_p == 0.0  # Hearth's default as the window sets it; the model's
    assert r.usage.completion_tokens <= 3 + 3 and r.choices[0].finish_reason in ("length", "stop")


def test_the_request_s_own_fields_win(served):
    srv, _store, _key, given = served
    client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
    client.chat.completions.create(model=srv.model_id, messages=ASK, temperature=0, top_p=0.5, max_tokens=2,
                                   stop=["."], extra_body={"top_k": 3})
    p = given[-1]
    assert (p.temperature, p.top_p, p.max_tokens, p.top_k, p.stop) == (0.0, 0.5, 2, 3, (".",))
    assert p.penalty_last_n == 128  # what it left out is still the model's


def test_anthropic_s_required_max_tokens_and_the_responses_api(served):
    srv, _store, _key, given = served
    a = anthropic.Anthropic(base_url=srv.url.removesuffix("/v1"), api_key="x", max_retries=0, timeout=120)
    a.messages.create(model=srv.model_id, max_tokens=4, messages=ASK)
    assert (given[-1].max_tokens, given[-1].temperature, given[-1].top_k) == (4, 0.6, 7)
    with pytest.raises(anthropic.BadRequestError, match="max_tokens is required"):
        a.messages.create(model=srv.model_id, max_tokens=None, messages=ASK)  # type: ignore[arg-type]
    o = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
    o.responses.create(model=srv.model_id, input="Name a colour.")
    assert (given[-1].max_tokens, given[-1].top_p) == (3, 0.95)


def test_the_model_card_shows_each_value_and_its_layer(served):
    srv, _store, _key, _given = served
    card = httpx.get(f"{srv.url}/models/{srv.model_id}").json()
    s = card["hearth_settings"]["settings"]
    assert s["temperature"] == {"value": 0.6, "layer": "model"} and s["top_k"] == {"value": 7, "layer": "yours"}
    assert s["presence_penalty"] == {"value": 0.5, "layer": "hearth"}
    assert s["max_tokens"] == {"value": 3, "layer": "yours"}
    assert card["hearth_settings"]["sources"] == {"model": "the GGUF file's general.sampling keys"}
    assert "general.sampling.mirostat not used: Hearth has no Mirostat sampler" in card["hearth_settings"]["notes"]


def test_a_change_to_the_model_s_settings_reaches_the_next_request(served):
    srv, store, key, given = served
    store.save({key: ModelEntry("qwen3-like.gguf", {"temperature": 0.2})})
    srv.defaults.changed()
    openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120).chat.completions.create(
        model=srv.model_id, messages=ASK, max_tokens=2)
    assert (given[-1].temperature, given[-1].top_k) == (0.2, 20)  # yours now, and the model's again


def test_without_model_settings_a_request_runs_until_the_model_stops(engine):
    srv = LocalServer(port=0)
    sched = Scheduler(engine, parallel=1)
    given = []
    submit = sched.submit
    sched.submit = lambda req: given.append(req.params) or submit(req)
    srv.attach(sched)
    srv.start()
    try:
        openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120).chat.completions.create(
            model=srv.model_id, messages=[{"role": "user", "content": "Say hi."}], temperature=0)
        assert given[-1].max_tokens is None and "hearth_settings" not in httpx.get(
            f"{srv.url}/models/{srv.model_id}").json()
    finally:
        srv.stop()
        sched.close()

"""What the window's replies get, an API request gets too, shown through the API with the official clients:
speculative decoding (its figures in llama-server's ``timings``), the thinking budget, the grammar that
starts after the reasoning, and the prefix cache on disk across a restart.

The thinking tests put Qwen3.5's real chat template on the bundled model (its GGUF read as usual, the
template replaced as if the file carried it), as tests/test_serve_reasoning.py does with Qwen3's: this
template's generation prompt opens the ``<think>`` block, so the bundled model, which never thinks on
its own, reasons from its first token, freely, until a budget closes the block. Greedy throughout.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import anthropic
import jsonschema
import openai
import pytest

from engine.backends.llama.backend import LlamaCppBackend
from engine.config import EngineConfig
from engine.engine import Engine
from engine.models.gguf import model_info
from engine.prompt.messages import Message
from serving import local_server

QWEN35 = (Path(__file__).parent / "fixtures" / "templates" / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")
Q = [{"role": "user", "content": "Say hi."}]
ECHO = [{"role": "user", "content": "Repeat after me exactly: the quick brown fox jumps over the lazy dog, "
                                    "the quick brown fox jumps over the lazy dog."}]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 20}}, "required": ["answer"],
          "additionalProperties": False}


def oai(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url, api_key="unused", max_retries=0, timeout=120)


def claude(srv) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", api_key="unused", max_retries=0, timeout=120)


def extra(obj) -> dict:
    return obj.model_extra or {}


# -- speculative decoding -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def speculating(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2))
    e.set_speculation("ngram", k=4, force=True)  # drafts every round, whatever the measured costs say
    with local_server(e, parallel=2, queue_limit=8) as srv:
        yield srv, e
    e.close()


def test_an_api_request_speculates_and_its_timings_say_how_much(speculating):
    srv, engine = speculating
    c = oai(srv)
    r = c.chat.completions.create(model=srv.model_id, messages=ECHO, max_tokens=40, temperature=0)
    t = extra(r)["timings"]
    assert t["draft_n"] > 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"]
    assert t["predicted_n"] == r.usage.completion_tokens and t["prompt_n"] + t["cache_n"] == r.usage.prompt_tokens
    # Streamed: the figures ride on the last chunk, as llama-server sends them.
    chunks = list(c.chat.completions.create(model=srv.model_id, messages=ECHO, max_tokens=40, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert "timings" not in extra(chunks[-2]) and extra(chunks[-1])["timings"]["draft_n"] > 0
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == r.choices[0].message.content
    # Speculation changes the speed, never the reply: the same request decoded plainly.
    engine.set_speculation("none")
    try:
        plain = c.chat.completions.create(model=srv.model_id, messages=ECHO, max_tokens=40, temperature=0)
    finally:
        engine.set_speculation("ngram", k=4, force=True)
    assert "draft_n" not in extra(plain)["timings"]
    assert plain.choices[0].message.content == r.choices[0].message.content
    # A raw completion speculates too.
    done = c.completions.create(model=srv.model_id, prompt="the quick brown fox, the quick brown fox, the quick",
                                max_tokens=24, temperature=0)
    assert extra(done)["timings"]["draft_n"] > 0


# -- a thinking model ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def thinking(bundled_path):
    info = dataclasses.replace(model_info(bundled_path), chat_template=QWEN35)
    e = Engine(LlamaCppBackend(bundled_path, n_ctx=2048, n_threads=2, info=info))
    assert e.layout is not None and e.layout.name == "qwen3" and e.layout.prompt_opens
    with local_server(e, parallel=2, queue_limit=8) as srv:
        yield srv
    e.close()


def chat(srv, **kw):
    return oai(srv).chat.completions.create(model=srv.model_id, messages=Q, temperature=0, **kw)


def test_a_thinking_budget_on_the_api_closes_the_block_and_the_model_answers(thinking):
    free = chat(thinking, max_tokens=24)
    msg = free.choices[0].message
    # Without a budget the bundled model reasons until max_tokens: no answer at all.
    assert free.choices[0].finish_reason == "length" and not msg.content and extra(msg)["reasoning_content"]
    budgeted = chat(thinking, max_tokens=24, extra_body={"reasoning_budget_tokens": 4})
    bmsg = budgeted.choices[0].message
    reasoning = extra(bmsg)["reasoning_content"]
    assert bmsg.content and reasoning and extra(msg)["reasoning_content"].startswith(reasoning)
    used = budgeted.usage.completion_tokens_details.reasoning_tokens
    assert used < free.usage.completion_tokens_details.reasoning_tokens and used < 24
    # Streamed the same: reasoning deltas, then the answer's.
    chunks = list(chat(thinking, max_tokens=24, stream=True, extra_body={"reasoning_budget_tokens": 4}))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    assert "".join(extra(d).get("reasoning_content") or "" for d in deltas) == reasoning
    assert "".join(d.content or "" for d in deltas) == bmsg.content
    # -1 is llama-server's "as the model's settings say": here, no budget.
    same = chat(thinking, max_tokens=24, extra_body={"reasoning_budget_tokens": -1})
    assert extra(same.choices[0].message)["reasoning_content"] == extra(msg)["reasoning_content"]
    # The Responses API takes the same field.
    resp = oai(thinking).responses.create(model=thinking.model_id, input="Say hi.", max_output_tokens=24,
                                          temperature=0, extra_body={"reasoning_budget_tokens": 4})
    assert resp.output_text == bmsg.content
    assert [o.type for o in resp.output] == ["reasoning", "message"]


def test_anthropic_thinking_budget_tokens_is_the_thinking_budget(thinking):
    a = claude(thinking)
    m = thinking.model_id
    budget = chat(thinking, max_tokens=24, extra_body={"reasoning_budget_tokens": 4}).choices[0].message
    r = a.messages.create(model=m, max_tokens=24, messages=Q, thinking={"type": "enabled", "budget_tokens": 4},
                          extra_body={"temperature": 0})
    assert [b.type for b in r.content] == ["thinking", "text"]
    assert (r.content[0].thinking, r.content[1].text) == (extra(budget)["reasoning_content"], budget.content)
    free = a.messages.create(model=m, max_tokens=24, messages=Q, thinking={"type": "enabled", "budget_tokens": 1000},
                             extra_body={"temperature": 0})
    assert [b.type for b in free.content] == ["thinking"] and free.stop_reason == "max_tokens"
    for bad, why in ((-1, "0 and up"), (2.5, "whole number"), ("4", "whole number"), (True, "whole number")):
        with pytest.raises(anthropic.BadRequestError) as e:
            a.messages.create(model=m, max_tokens=24, messages=Q, thinking={"type": "enabled", "budget_tokens": bad})
        assert "thinking.budget_tokens" in e.value.body["error"]["message"] and why in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="goes with"):
        a.messages.create(model=m, max_tokens=24, messages=Q,
                          extra_body={"thinking": {"type": "disabled", "budget_tokens": 4}})


def test_a_malformed_reasoning_budget_is_a_400_naming_the_field(thinking):
    c, m = oai(thinking), thinking.model_id
    served = thinking.served
    for bad in (-2, 1.5, "64", True, 1 << 31, {"tokens": 4}):
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=m, messages=Q, max_tokens=4, extra_body={"reasoning_budget_tokens": bad})
        assert e.value.body["param"] == "reasoning_budget_tokens", bad
        assert e.value.body["code"] == "invalid_reasoning_budget"
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=m, input="Hi", max_output_tokens=4, extra_body={"reasoning_budget_tokens": -5})
    assert e.value.body["param"] == "reasoning_budget_tokens"
    assert thinking.served == served


def test_a_json_schema_shapes_the_answer_after_free_reasoning(thinking):
    fmt = {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA}}
    shaped = chat(thinking, max_tokens=60, response_format=fmt, extra_body={"reasoning_budget_tokens": 6})
    msg = shaped.choices[0].message
    jsonschema.validate(json.loads(msg.content), SCHEMA)
    assert shaped.choices[0].finish_reason == "stop"
    # The reasoning is the model's own: token for token what it reasons with no schema at all.
    unshaped = chat(thinking, max_tokens=60, extra_body={"reasoning_budget_tokens": 6}).choices[0].message
    assert extra(msg)["reasoning_content"] == extra(unshaped)["reasoning_content"]
    assert not extra(msg)["reasoning_content"].lstrip().startswith("{")
    # Anthropic's output_config.format, the same way.
    r = claude(thinking).messages.create(
        model=thinking.model_id, max_tokens=60, messages=Q, thinking={"type": "enabled", "budget_tokens": 6},
        extra_body={"temperature": 0, "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}})
    assert [b.type for b in r.content] == ["thinking", "text"]
    assert r.content[0].thinking == extra(msg)["reasoning_content"]
    jsonschema.validate(json.loads(r.content[1].text), SCHEMA)


# -- the prefix cache on disk ------------------------------------------------------------------------------


def test_a_system_prompt_is_served_from_disk_after_a_restart(bundled_path, tmp_path):
    system = "You are a concise assistant. Answer in one sentence. " * 4

    def restart_and_ask(question: str, protocol: str) -> tuple[int, int, int]:
        """A new engine and server over the same disk folder: (prompt tokens, cached, the system prompt's)."""
        e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, disk_cache=tmp_path))
        try:
            sys_len = len(e.backend.tokenize(e.template.render([Message("system", system)],
                                                               add_generation_prompt=False)))
            with local_server(e, parallel=2, queue_limit=8) as srv:
                if protocol == "openai":
                    u = oai(srv).chat.completions.create(
                        model=srv.model_id, max_tokens=4, temperature=0,
                        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}]).usage
                    return u.prompt_tokens, u.prompt_tokens_details.cached_tokens, sys_len
                a = claude(srv).messages.create(model=srv.model_id, max_tokens=4, system=system, extra_body={
                    "temperature": 0}, messages=[{"role": "user", "content": question}]).usage
                return a.input_tokens + a.cache_read_input_tokens, a.cache_read_input_tokens, sys_len
        finally:
            e.close()

    prompt, cached, _ = restart_and_ask("What is snow?", "openai")
    assert cached == 0 and len(list(tmp_path.glob("*.kv"))) == 1
    # A restart: a new engine over the same folder reads the system prompt's KV from disk, for either protocol.
    for question, protocol in (("What is rain?", "openai"), ("What is hail?", "anthropic")):
        prompt, cached, sys_len = restart_and_ask(question, protocol)
        assert sys_len <= cached < prompt, protocol

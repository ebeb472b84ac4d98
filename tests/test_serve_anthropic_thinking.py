"""Anthropic's Messages endpoint with a thinking model, driven by the official ``anthropic`` client.

As in test_serve_reasoning.py, the bundled model wears Qwen3's real chat template and a GBNF
grammar (llama-server's ``grammar`` field, sent as ``extra_body``) fixes the reply's layout:
a think block, then the answer. The reasoning must come back as a ``thinking`` block before
the ``text`` block, whole and streamed; ``thinking: disabled`` is the template's own switch."""
from __future__ import annotations

import dataclasses
import json

import anthropic
import openai
import pytest

from engine.backends.llama.backend import LlamaCppBackend
from engine.engine import Engine
from engine.models.gguf import model_info
from engine.serve.protocols.anthropic import parse_anthropic as parse
from serving import local_server
from tests.test_serve_reasoning import QWEN3, THINK

Q = [{"role": "user", "content": "Say hi. 🙂"}]
FORCED = {"temperature": 0, "grammar": THINK}


@pytest.fixture(scope="module")
def server(bundled_path):
    info = dataclasses.replace(model_info(bundled_path), chat_template=QWEN3)
    e = Engine(LlamaCppBackend(bundled_path, n_ctx=2048, n_threads=2, info=info))
    with local_server(e, parallel=2, queue_limit=8) as srv:
        yield srv
    e.close()


@pytest.fixture
def client(server):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference(server):
    """The same forced reply through the OpenAI path: its reasoning and its answer."""
    o = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=120)
    r = o.chat.completions.create(model=server.model_id, messages=Q, max_tokens=60, temperature=0,
                                  extra_body={"grammar": THINK})
    msg = r.choices[0].message
    return (msg.model_extra or {})["reasoning_content"], msg.content, r.usage


def create(client, server, max_tokens=60, messages=Q, **extra):
    return client.messages.create(model=server.model_id, max_tokens=max_tokens, messages=messages,
                                  extra_body={**FORCED, **extra})


def test_reasoning_is_a_thinking_block_before_the_text(client, server, reference):
    reasoning, answer, use = reference
    r = create(client, server)
    assert [b.type for b in r.content] == ["thinking", "text"]
    assert (r.content[0].thinking, r.content[0].signature, r.content[1].text) == (reasoning, "", answer)
    assert r.stop_reason == "end_turn"
    assert r.usage.output_tokens == use.completion_tokens
    assert r.usage.output_tokens_details.thinking_tokens == use.completion_tokens_details.reasoning_tokens > 0


def test_streamed_thinking_then_text(client, server, reference):
    reasoning, answer, _use = reference
    with client.messages.stream(model=server.model_id, max_tokens=60, messages=Q, extra_body=FORCED) as stream:
        events = list(stream)
        final = stream.get_final_message()
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [(e.index, e.delta.type) for e in events if e.type == "content_block_delta"]
    kinds = [k for _i, k in deltas]
    first_text = kinds.index("text_delta")
    assert set(kinds[:first_text]) == {"thinking_delta", "signature_delta"}
    assert kinds[first_text - 1] == "signature_delta"  # the thinking block's last delta
    assert set(kinds[first_text:]) == {"text_delta"}
    assert {i for i, k in deltas if k != "text_delta"} == {0} and {i for i, k in deltas if k == "text_delta"} == {1}
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert (final.content[0].thinking, final.content[1].text) == (reasoning, answer)
    assert final.usage.output_tokens_details.thinking_tokens > 0


def test_a_reply_cut_inside_its_thinking_is_max_tokens_with_the_thinking_only(client, server, reference):
    reasoning, _answer, use = reference
    n = use.completion_tokens_details.reasoning_tokens - 2  # inside the block, before its closing tag
    r = create(client, server, max_tokens=n)
    assert r.stop_reason == "max_tokens" and [b.type for b in r.content] == ["thinking"]
    o = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=120).chat.completions.create(
        model=server.model_id, messages=Q, max_tokens=n, temperature=0, extra_body={"grammar": THINK})
    assert r.content[0].thinking == (o.choices[0].message.model_extra or {})["reasoning_content"]
    assert r.content[0].thinking[:len(reasoning)] == reasoning
    assert r.usage.output_tokens == r.usage.output_tokens_details.thinking_tokens == n
    events = list(client.messages.create(model=server.model_id, max_tokens=n, messages=Q, stream=True,
                                         extra_body=FORCED))
    assert [e.content_block.type for e in events if e.type == "content_block_start"] == ["thinking"]
    assert events[-2].delta.stop_reason == "max_tokens"


def test_thinking_disabled_is_the_templates_switch(client, server):
    o = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=120)

    def prompt(**kw):
        return o.chat.completions.create(model=server.model_id, messages=Q, max_tokens=1, temperature=0,
                                         **kw).usage.prompt_tokens

    def read(u):
        return u.input_tokens + u.cache_read_input_tokens

    off = client.messages.create(model=server.model_id, max_tokens=1, messages=Q, thinking={"type": "disabled"},
                                 extra_body={"temperature": 0})
    on = client.messages.create(model=server.model_id, max_tokens=1, messages=Q,
                                thinking={"type": "enabled", "budget_tokens": 1024}, extra_body={"temperature": 0})
    assert read(off.usage) == prompt(extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert read(on.usage) == prompt() < read(off.usage)
    assert server.finished[-2].request.template_kwargs == {"enable_thinking": False}


def test_thinking_sent_back_is_the_assistants_reasoning(client, server):
    said = [{"type": "thinking", "thinking": "the user greets me; be brief 🙂", "signature": ""},
            {"type": "text", "text": "Hello."}]
    r = client.messages.create(model=server.model_id, max_tokens=1, extra_body={"temperature": 0},
                               messages=[Q[0], {"role": "assistant", "content": said},
                                         {"role": "user", "content": "Again?"}])
    req = server.finished[-1].request
    assert req.messages[1].reasoning == said[0]["thinking"] and req.messages[1].content == "Hello."
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens > 0


def test_parse_reads_what_claude_code_sends():
    """A body shaped like Claude Code's: system blocks with cache_control, metadata, thinking,
    output_config and a top-level cache_control, none of which may fail the request."""
    body = json.loads(json.dumps({
        "model": "m", "max_tokens": 32000, "stream": True, "metadata": {"user_id": "u"},
        "cache_control": {"type": "ephemeral"}, "thinking": {"type": "adaptive"},
        "output_config": {"effort": "max"},
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi",
                                                   "cache_control": {"type": "ephemeral"}}]}],
    }))
    req = parse(body)
    assert [m.role for m in req.messages] == ["system", "user"] and req.messages[0].content == "You are Claude Code."
    assert (req.max_tokens, req.stream, req.thinking) == (32000, True, True)
    assert req.template_kwargs == {"reasoning_effort": "high"}

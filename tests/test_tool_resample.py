"""A tool call that fails its schema is drawn again from its section's start, a few times, and then
given back as text with the reason (issue #43), in the engine's own loop and in the batch path; the
KV and the grammar are set back exactly, so what follows is as if the failed draw never happened.

The bundled model wears Qwen 2.5's real template (Hermes calls). A keyword no grammar can say
(``not``) makes the first draw fail on purpose: the value greedy decoding writes is the one refused.
"""
from __future__ import annotations

import json

import pytest
from grammar_check import accepts
from serving import qwen_tool_engine

from engine.prompt.messages import Message
from engine.reply_formats.tool_parser import ToolCallParser, fence_call
from engine.reply_formats.tools import Tool, ToolPlan
from engine.reply_formats.tool_syntax import syntax_by_name
from engine.serve.runtime.requests import ServeRequest
from engine.serve.runtime.scheduler import Scheduler
from engine.types import SamplingParams

ASK = [Message("user", "Set the counter to a number.")]
GREEDY = SamplingParams(temperature=0.0, max_tokens=60)


def counter(extra: dict | None = None) -> Tool:
    return Tool("set_counter", {"type": "object", "properties": {"n": {"type": "integer", **(extra or {})}},
                                "required": ["n"]})


def reply(engine, tool: Tool):
    events = list(engine.stream(ASK, GREEDY, tools=engine.plan_tools([tool], "required", parallel=False)))
    calls = [e.tool_call for e in events if e.kind == "tool_call"]
    return events[-1], calls


def scheduled(sched: Scheduler, engine, tool: Tool):
    plan = engine.plan_tools([tool], "required", parallel=False)
    t = sched.submit(ServeRequest(messages=ASK, params=GREEDY, tools=plan))
    events = list(t.events())
    return events[-1], [e.tool_call for e in events if e.kind == "tool_call"]


@pytest.fixture(scope="module")
def tooled(bundled_path):
    with qwen_tool_engine(bundled_path, n_ctx=2048) as e:
        yield e


@pytest.fixture(scope="module")
def greedy_value(tooled):
    final, calls = reply(tooled, counter())
    assert final.finish_reason == "tool_calls" and final.stats.tool_resamples == 0
    return json.loads(calls[0].arguments)["n"]


def test_a_failed_call_is_drawn_again_and_the_new_call_is_valid(tooled, greedy_value):
    final, calls = reply(tooled, counter({"not": {"const": greedy_value}}))
    assert final.finish_reason == "tool_calls" and final.stats.tool_resamples >= 1
    n = json.loads(calls[0].arguments)["n"]
    assert isinstance(n, int) and n != greedy_value  # the refused value was never given out
    assert len(calls) == 1 and final.tool_calls[0].arguments == calls[0].arguments


def test_a_call_that_never_passes_is_given_back_as_text_with_the_reason(tooled, bundled_path):
    final, calls = reply(tooled, counter({"not": {}}))  # nothing passes "not": {}
    assert calls == [] and final.finish_reason != "tool_calls" and final.stats.tool_resamples == 2
    assert any("did not match its schema after 3 tries" in n for n in final.stats.notes)
    assert "set_counter" in final.text  # shown as the model wrote it, not run
    # The KV, the prefix cache and the grammar were set back exactly: the next reply equals a fresh engine's.
    after = list(tooled.stream([Message("user", "Say hello.")], SamplingParams(temperature=0.0, max_tokens=16)))
    with qwen_tool_engine(bundled_path, n_ctx=2048) as fresh:
        again = list(fresh.stream([Message("user", "Say hello.")], SamplingParams(temperature=0.0, max_tokens=16)))
    assert after[-1].token_ids == again[-1].token_ids


def test_an_api_request_draws_again_too_and_frees_its_sequence(tooled, greedy_value):
    sched = Scheduler(tooled, parallel=2, queue_limit=4)
    try:
        assert sched.batching
        final, calls = scheduled(sched, tooled, counter({"not": {"const": greedy_value}}))
        assert final.finish_reason == "tool_calls" and final.stats.tool_resamples >= 1
        assert json.loads(calls[0].arguments)["n"] != greedy_value
        final, calls = scheduled(sched, tooled, counter({"not": {}}))
        assert calls == [] and final.stats.tool_resamples == 2
        assert sched.wait_idle(60) and tooled.core.wait_idle(60)
        assert tooled.core.requests() == []  # every sequence is free again
    finally:
        sched.close()


# -- Qwen2.5-Coder's fenced calls (tool_choice auto) -----------------------------------------------

WEATHER = Tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def test_a_fenced_json_call_is_a_call_and_other_json_stays_text(llama_backend):
    plan = ToolPlan(syntax_by_name("hermes"), (WEATHER,))
    p = ToolCallParser(plan)
    out = []
    for piece in ["Sure.\n", "```", "json\n{\"name\": \"get_", 'weather", "arguments": {"city": "Rome"}}\n', "```"]:
        out += p.feed(piece)
    out += p.finish()[0]
    assert [e.call.name for e in out if e.kind == "call"] == ["get_weather"]
    assert "".join(e.text for e in out if e.kind == "text") == "Sure.\n"
    p = ToolCallParser(plan)
    example = 'A person:\n```json\n{"name": "Bob", "age": 3}\n```\n'
    out = p.feed(example) + p.finish()[0]
    assert all(e.kind == "text" for e in out) and "".join(e.text for e in out) == example
    f = plan.fenced()
    assert fence_call('```json\n{"name": "get_w', f, {"get_weather"}) == "wait"
    assert fence_call('```json\n[1, 2]', f, {"get_weather"}) == "text"
    # The lazy grammar starts at the fence only when it names a tool, and writes the rest of the call.
    import re

    trigger = re.compile(plan.triggers()[1])
    assert trigger.search('ok\n```json\n{"name": "get_weather"') and not trigger.search('```json\n{"name": "Bob"')
    call = '```json\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n```'
    assert accepts(llama_backend, plan.grammar(), call)
    assert not accepts(llama_backend, plan.grammar(), '```json\n{"name": "get_weather", "arguments": {}}\n```')
    assert ToolPlan(syntax_by_name("hermes"), (WEATHER,), "required").fenced() is None  # forced: its own syntax

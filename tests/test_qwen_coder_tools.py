"""Qwen2.5-Coder-1.5B-Instruct (real weights, Q4_K_M, its own Qwen 2.5 template) with ``tool_choice``
auto writes its calls as a fenced ```json block rather than in ``<tool_call>`` tags: that form is a call
too, as llama.cpp's Hermes parser reads it (issue #43), through the engine and through the API."""
from __future__ import annotations

import json

import openai
import pytest
from serving import local_server

from engine.config import EngineConfig
from engine.engine import Engine
from engine.prompt.messages import Message
from engine.reply_formats.tools import Tool
from engine.types import SamplingParams

WEATHER = Tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
               "Get the current weather in a city")


@pytest.fixture(scope="module")
def coder(qwen_coder):
    e = Engine.open(EngineConfig(qwen_coder, n_ctx=4096, n_threads=2))
    yield e
    e.close()


def test_the_fenced_call_qwen_coder_writes_is_a_call(coder):
    final = list(coder.stream([Message("user", "What is the weather in Paris right now?")],
                              SamplingParams(temperature=0.0, max_tokens=120), tools=coder.plan_tools([WEATHER])))[-1]
    written = b"".join(coder.backend.token_bytes(t) for t in final.token_ids).decode()
    assert written.startswith("```json") and written.rstrip().endswith("```"), written  # its own form, not tags
    assert final.finish_reason == "tool_calls" and final.text == ""
    [call] = final.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})


def test_qwen_coder_calls_a_tool_through_the_api_when_asked(coder):
    with local_server(coder, parallel=1) as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=300)
        r = client.chat.completions.create(
            model=srv.model_id, temperature=0, max_tokens=120,
            messages=[{"role": "user", "content": "Use the get_weather tool to check the weather in Tokyo."}],
            tools=[{"type": "function", "function": {"name": WEATHER.name, "description": WEATHER.description,
                                                     "parameters": dict(WEATHER.parameters)}}])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Tokyo"}

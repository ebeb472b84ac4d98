"""The remote engine against the two real servers that run here: another Hearth and llama-cpp-python's own.

Hearth serving Hearth: thinking (the server splits ``reasoning_content``), a tool
call, and an image (the tests' tiny VLM), each compared with what the local engine
gives for the same request. ``python -m llama_cpp.server`` (llama-cpp-python's
OpenAI-compatible server, a third party's code) serves the bundled model: a reply,
Stop, a tool call (its chatml-function-calling format) and a thinking layout that
the server does not split, split on this side.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from engine import Message, SamplingParams
from engine.prompt.messages import ImagePart
from engine.reply_formats.tools import Tool
from engine.remote.connect import open_remote
from engine.remote.pins import MemoryPins
from engine.inputs.images import probe_image
from serving import local_server, qwen_tool_engine
from test_images import png
from test_serve_reasoning import THINK, thinking_engine  # noqa: F401 (a fixture)

WEATHER = Tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
               "The weather in a city")


def remote(url: str, model: str | None = None):
    return open_remote(url, None, model, pins=MemoryPins())


def test_thinking_through_hearth_arrives_as_reasoning(thinking_engine):  # noqa: F811
    msgs = [Message("user", "Say hi.")]
    params = SamplingParams(temperature=0.0, max_tokens=40, grammar=THINK, grammar_scope="reply")
    local = list(thinking_engine.stream(msgs, params))[-1]
    with local_server(thinking_engine) as srv:
        events = list(remote(srv.url).stream(msgs, params))
    final = events[-1]
    assert final.reasoning == local.reasoning and final.reasoning and final.text == local.text
    assert "".join(e.text for e in events if e.kind == "reasoning") == final.reasoning
    assert "<think>" not in final.text and final.stats.reasoning_tokens > 0


def test_a_tool_call_through_hearth(bundled_path):
    with qwen_tool_engine(bundled_path) as eng, local_server(eng) as srv:
        r = remote(srv.url)
        plan = r.plan_tools([WEATHER], "get_weather", parallel=False)
        events = list(r.stream([Message("user", "What is the weather in Paris?")],
                               SamplingParams(temperature=0.0, max_tokens=60), tools=plan))
    final = events[-1]
    assert final.finish_reason == "tool_calls" and [c.name for c in final.tool_calls] == ["get_weather"]
    assert isinstance(json.loads(final.tool_calls[0].arguments)["city"], str)
    deltas = [e.tool_call for e in events if e.kind == "tool_call"]
    assert deltas and "".join(d.arguments for d in deltas) == final.tool_calls[0].arguments


def test_an_image_through_hearth_is_the_local_reply(tiny_vlm):
    from engine.config import EngineConfig
    from engine.engine import Engine

    model, mmproj = tiny_vlm
    data = png(20)
    img = probe_image(data)
    msgs = [Message.of("user", "What is in this picture?", ImagePart(img.sha256, img.mime, data))]
    params = SamplingParams(temperature=0.0, max_tokens=8)
    e = Engine.open(EngineConfig(model, n_ctx=2048, n_threads=2, mmproj=mmproj))
    try:
        local = list(e.stream(msgs, params))[-1]
        text_only = e.count_tokens([Message("user", "What is in this picture?")])
        with local_server(e) as srv:
            final = list(remote(srv.url).stream(msgs, params))[-1]
    finally:
        e.close()
    # the server read the image: its positions are in the prompt, and the reply is the local one
    assert final.text == local.text and final.stats.prompt_tokens == local.stats.prompt_tokens > text_only


@pytest.fixture(scope="module")
def llama_server(bundled_path, tmp_path_factory):
    """``python -m llama_cpp.server`` on 127.0.0.1 serving the bundled model as "smol"."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama-server") / "stderr.txt"
    with open(log, "w") as err:  # llama.cpp's load log would fill a pipe and block the server
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_path),
                                 "--model_alias", "smol", "--chat_format", "chatml-function-calling",
                                 "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "2"],
                                stdout=subprocess.DEVNULL, stderr=err, env={**os.environ})
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 60
    while True:
        try:
            remote(url)
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(30)


def test_llama_cpp_server_streams_and_stops(llama_server):
    r = remote(llama_server, "smol")
    assert r.describe().runtime == "remote (me)"  # what llama-cpp-python's /v1/models says of itself
    final = list(r.stream([Message("user", "Say hello.")], SamplingParams(temperature=0.0, max_tokens=12)))[-1]
    # llama-cpp-python's server sends no usage in a stream: the tokens are counted here, and it says so
    assert final.text and final.stats.generated_tokens > 0 and final.stats.prompt_tokens == 0
    assert any("reported no token usage" in n for n in final.stats.notes)
    assert final.finish_reason in ("eos", "max_tokens")
    cancel = threading.Event()
    seen = 0
    for ev in r.stream([Message("user", "Write a long story about a dragon.")],
                       SamplingParams(temperature=0.0, max_tokens=500), cancel=cancel):
        if ev.kind == "delta":
            seen += 1
            if seen == 3:
                cancel.set()
                t0 = time.perf_counter()
        elif ev.kind == "final":
            assert ev.finish_reason == "cancelled" and time.perf_counter() - t0 < 0.3 and ev.text


def test_llama_cpp_server_calls_a_tool(llama_server):
    r = remote(llama_server, "smol")
    plan = r.plan_tools([WEATHER], "get_weather", parallel=False)
    final = list(r.stream([Message("user", "What is the weather in Paris?")],
                          SamplingParams(temperature=0.0, max_tokens=40), tools=plan))[-1]
    assert final.finish_reason == "tool_calls" and final.tool_calls[0].name == "get_weather"
    assert isinstance(json.loads(final.tool_calls[0].arguments), dict)


def test_a_thinking_layout_the_server_does_not_split_is_split_here(llama_server):
    grammar = 'root ::= "<think>" [a-z ]{4,20} "</think>" [A-Z] [a-z ]{2,20}'
    events = list(remote(llama_server, "smol").stream(
        [Message("user", "Hi")], SamplingParams(temperature=0.0, max_tokens=40, grammar=grammar)))
    final = events[-1]
    assert final.reasoning and "<think>" not in final.reasoning and "</think>" not in final.text
    assert final.text and final.text[0].isupper()

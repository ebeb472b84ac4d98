"""What the window does on a local model, on a server's: thinking, a tool call with its approval, an image.

Thinking comes from a server that splits ``reasoning_content`` (tests/openai_script.py,
as vLLM and llama-server send it). The tool call and the image come from another Hearth
in its own process: the bundled model wearing Qwen 2.5's template (Hermes tool calls),
with the window's MCP loop and a real MCP server; and the tests' tiny VLM with its
projector.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from openai_script import ScriptServer
from serving import QWEN, hearth_process
from test_app_remote import add_server, send, stop_within_300_ms, use_remote
from test_app_think import with_template
from test_app_tool_calls import ASK, asked, calc, roles
from test_images import png
from test_remote_servers import llama_server  # noqa: F401 (a fixture)


def test_reasoning_from_a_server_shows_in_the_reasoning_block_and_is_kept(qtbot, make_window):
    script = ScriptServer(["The user ", "greets me."], ["Hello", " there!"])
    try:
        w = make_window()
        add_server(qtbot, w, script.url)
        use_remote(qtbot, w, script.url)
        assert w.host.model.n_ctx == 32768  # vLLM's max_model_len
        mid = send(w, "Hi")
        qtbot.waitUntil(lambda: w.stream is None, timeout=30_000)
        stored = w.store.message(mid)
        assert stored.reasoning == "The user greets me." and stored.content == "Hello there!" and stored.complete
        assert stored.metrics["cached_tokens"] == 16 and stored.metrics["prompt_tokens"] == 30
        view = w.chat.widget(mid)
        assert view.thinking.text == "The user greets me." and not view.thinking.isHidden()
        # it cannot count tokens (no route for it): the context meter says its counts are estimates, once
        assert w.context_label.text() == "Context ≈42 / 32,768"  # the server's usage: 30 prompt, 12 reply
        assert w.context_label.toolTip().count("cannot count tokens") == 1
        sent = script.requests[-1]
        assert sent["messages"][-1] == {"role": "user", "content": "Hi"} and sent["temperature"] == 0.0
        assert sent["stream_options"] == {"include_usage": True}
    finally:
        script.close()


@pytest.fixture(scope="module")
def qwen_server(bundled_path, tmp_path_factory):
    model = with_template(Path(bundled_path), tmp_path_factory.mktemp("q") / "smol-qwen.gguf", QWEN)
    with hearth_process(tmp_path_factory.mktemp("qwen-hearth"), "--model", str(model)) as served:
        yield served


def remote_with_calc(qtbot, make_window, url: str, tmp_path):
    """A window on the server's model at ``url`` with the MCP calc server's add tool, a call required."""
    w = make_window(max_tokens=64)
    add_server(qtbot, w, url)
    use_remote(qtbot, w, url)
    w.apply_settings(replace(w.settings, mcp_servers=[calc(tmp_path, "add")], tool_choice="required",
                             max_tool_calls=1).validate())
    qtbot.waitUntil(lambda: "calc" in w.replies.tools.states and w.replies.tools.states["calc"].ready,
                    timeout=60_000)
    return w


def test_a_remote_models_tool_call_runs_after_approval_and_the_reply_uses_its_result(
        qtbot, make_window, qwen_server, tmp_path):
    url, _port = qwen_server
    w = remote_with_calc(qtbot, make_window, url, tmp_path)
    assert w.host.model.backend == "remote"  # the settings change kept the server's model
    send(w, ASK)
    qtbot.waitUntil(lambda: w.stream is None or w.replies.tools.pending is not None, timeout=60_000)
    assert w.replies.tools.pending is not None, (w.info.messages(), [(m.role, m.content, m.error, m.tool_calls)
                                                                    for m in w.store.messages(w.current)])
    card = asked(qtbot, w)
    assert (card.tool, card.server) == ("add", "calc") and roles(w) == ["user", "assistant"]  # asked, not run
    card.btn_allow.click()
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    assert roles(w) == ["user", "assistant", "tool", "assistant"]
    msgs = w.store.messages(w.current)
    (call,) = msgs[1].tool_calls
    args = json.loads(call.arguments)
    assert call.name == "add" and msgs[2].content == str(args["a"] + args["b"]) and msgs[3].content


def test_an_image_goes_to_a_remote_hearth_that_sees_images(qtbot, make_window, tiny_vlm, tmp_path_factory, tmp_path):
    model, mmproj = tiny_vlm
    with hearth_process(tmp_path_factory.mktemp("vlm-hearth"), "--model", str(model), "--mmproj",
                        str(mmproj)) as (url, _port):
        w = make_window()
        add_server(qtbot, w, url)
        use_remote(qtbot, w, url)
        assert w.host.sees_images
        picture = tmp_path / "cat.png"
        picture.write_bytes(png(30))
        w.chat.attach.add_paths([str(picture)])
        qtbot.waitUntil(lambda: len(w.chat.attach.images) == 1, timeout=20_000)
        assert w.chat.attach.status.text() == "1 image attached"  # the server counts its tokens
        with_image = send(w, "What is in this picture?")
        qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
        without = send(w, "What is in this picture?")
        qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
        first, second = w.store.message(with_image), w.store.message(without)
        assert first.content and first.metrics["backend"] == "remote"
        # the second prompt holds the first turn (its image included) and a second question
        assert second.metrics["prompt_tokens"] > first.metrics["prompt_tokens"] > 0
        assert any(p.kind == "image" for p in w.store.messages(w.current)[0].parts)


def test_llama_cpp_server_in_the_window_streams_and_stops(qtbot, make_window, llama_server):  # noqa: F811
    w = make_window(max_tokens=1000)
    add_server(qtbot, w, llama_server)
    use_remote(qtbot, w, llama_server)
    assert w.host.model.label == "smol" and "remote (me)" in w.model_label.toolTip()
    stop_within_300_ms(qtbot, w)


def test_a_tool_call_on_llama_cpp_server_in_the_window(qtbot, make_window, llama_server, tmp_path):  # noqa: F811
    """llama-cpp-python's server (chatml-function-calling) writes the call; the window asks, runs it, answers."""
    w = remote_with_calc(qtbot, make_window, llama_server, tmp_path)
    send(w, ASK)
    card = asked(qtbot, w)
    assert (card.tool, card.server) == ("add", "calc")
    card.btn_allow.click()
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    assert roles(w)[:3] == ["user", "assistant", "tool"], w.info.messages()
    msgs = w.store.messages(w.current)
    args = json.loads(msgs[1].tool_calls[0].arguments)
    assert msgs[2].content == str(args["a"] + args["b"])


def test_reasoning_from_a_remote_hearth_fills_the_reasoning_block(qtbot, make_window, bundled_path, tmp_path_factory):
    """MiniMax-M2's template opens the thinking block in the prompt: the other Hearth's parser sends what the
    model writes as reasoning_content, which the window shows as reasoning (cut short here: open)."""
    m2 = (Path(__file__).parent / "fixtures" / "templates" / "MiniMax-M2.jinja")
    model = with_template(Path(bundled_path), tmp_path_factory.mktemp("m2") / "smol-m2.gguf", m2.read_text())
    with hearth_process(tmp_path_factory.mktemp("m2-hearth"), "--model", str(model)) as (url, _port):
        w = make_window(max_tokens=12)
        add_server(qtbot, w, url)
        use_remote(qtbot, w, url)
        mid = send(w, "Hi")
        qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
        stored = w.store.message(mid)
        assert stored.reasoning and stored.content == "" and stored.reasoning_open
        assert w.chat.widget(mid).thinking.text == stored.reasoning

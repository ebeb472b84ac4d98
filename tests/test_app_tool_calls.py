"""MCP tools in the real window (offscreen), called by the real bundled model.

The bundled model wears Qwen2.5's real chat template (a copy of the GGUF with that template,
written with gguf-py), so the engine knows the Hermes ``<tool_call>`` syntax. With "Calling:
the first step must call a tool" the call grammar makes it call the one tool the test
server (tests/mcp_server.py, a real MCP server over stdio) offers. One call per reply is
allowed, so the step after the call answers with its result in the prompt. Each test checks
what the store keeps, so that nothing is lost whatever the user or the server does.
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from app.chat.tool_card import ASKING, RUNNING, ToolCard
from app.core import tool_steps
from app.core.settings import Settings, SettingsFile
from app.window.main_window import MainWindow
from serving import QWEN
from test_app_think import with_template
from test_app_window import type_and_enter, wait_reply

SERVER = str(Path(__file__).parent / "mcp_server.py")
ASK = "What is 2 + 3? Use the add tool."


@pytest.fixture(scope="module")
def qwen_model(bundled_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen25") / "smollm2-with-qwen2.5-template.gguf"
    return with_template(Path(bundled_path), out, QWEN)


def calc(root: Path, only: str, name: str = "calc") -> dict:
    return {"name": name, "kind": "stdio", "command": sys.executable,
            "args": [SERVER, "stdio", str(root), "--only", only]}


@pytest.fixture
def window(make_window, qwen_model, tmp_path, qtbot):
    def make(only: str = "add", model: str | None = None, ready: bool = True, **kw) -> MainWindow:
        s = Settings(model=model or str(qwen_model), mcp_servers=[calc(tmp_path, only)], tool_choice="required",
                     max_tool_calls=1, **kw)
        s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 48})
        SettingsFile().save(s)
        w = make_window(write=False)
        if ready:
            qtbot.waitUntil(lambda: "calc" in w.replies.tools.states, timeout=60_000)
            assert w.replies.tools.states["calc"].ready, w.replies.tools.states
        return w

    return make


def asked(qtbot, w: MainWindow) -> ToolCard:
    """The card of the call the reply waits on, once it asks."""
    t = w.replies.tools
    qtbot.waitUntil(lambda: t.pending is not None and t.pending.card is not None
                    and t.pending.card.state == ASKING, timeout=60_000)
    assert t.pending is not None and t.pending.card is not None
    return t.pending.card


def roles(w: MainWindow) -> list[str]:
    return [m.role for m in w.store.messages(w.current)]


def step_cards(w: MainWindow) -> list[ToolCard]:
    return [c for m in w.store.messages(w.current) if m.role == "assistant" and w.chat.widget(m.id)
            for c in w.chat.widget(m.id).cards()]


def test_a_call_runs_only_after_allow_and_the_reply_answers_with_its_result(qtbot, window):
    w = window()
    type_and_enter(w, ASK)
    card = asked(qtbot, w)
    msgs = w.store.messages(w.current)
    assert [m.role for m in msgs] == ["user", "assistant"]  # nothing ran: no result
    (call,) = msgs[1].tool_calls
    args = json.loads(call.arguments)
    assert call.name == "add" and set(args) == {"a", "b"}
    assert msgs[1].finish_reason == "tool_calls"
    assert (card.tool, card.server) == ("add", "calc") and json.loads(card.args.text()) == args
    assert all(b.isVisibleTo(card) for b in card.buttons)
    assert card.head.text() == "Tool call: add · calc — wants to run"
    qtbot.wait(500)
    assert roles(w) == ["user", "assistant"] and w.stream is not None  # still asking, still nothing run
    card.btn_allow.click()
    wait_reply(qtbot, w)
    msgs = w.store.messages(w.current)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant"]
    result = msgs[2]
    assert result.tool_call_id == call.id and result.content == str(args["a"] + args["b"])
    assert result.finish_reason == tool_steps.DONE and result.metrics["tool"]["server"] == "calc"
    assert msgs[3].complete and msgs[3].content and not msgs[3].tool_calls
    assert "this reply made 1 tool call, the limit" in " ".join(msgs[3].metrics["notes"])  # none called after it
    # The tools are still shown to the step after the limit (tool_choice "none"), so it reads the first
    # step's whole prompt from the cache instead of computing a prompt without them.
    assert msgs[3].metrics["cached_tokens"] >= msgs[1].metrics["prompt_tokens"] - 1
    assert card.state == tool_steps.DONE and card.result.text() == result.content
    assert "took" in card.status.text() and not any(b.isVisibleTo(card) for b in card.buttons)
    # Drawn again from the history, the step shows the same card, answered.
    w.open_conversation(w.current)
    (again,) = step_cards(w)
    assert again.state == tool_steps.DONE and again.result.text() == result.content and again.server == "calc"
    # Regenerate writes the whole reply again, and runs nothing without asking again.
    w.chat.regenerate_requested.emit(msgs[3].id)
    card = asked(qtbot, w)
    assert roles(w) == ["user", "assistant"]  # the new version, asking
    card.btn_deny.click()
    wait_reply(qtbot, w)
    msgs = w.store.messages(w.current)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[2].content == tool_steps.DENIED_TEXT and msgs[2].finish_reason == tool_steps.DENIED
    assert card.state == tool_steps.DENIED and msgs[3].complete


def test_stop_while_asking_ends_the_reply_and_keeps_the_call(qtbot, window):
    w = window()
    type_and_enter(w, ASK)
    card = asked(qtbot, w)
    assert w.chat.stop_button.isVisibleTo(w)
    w.chat.stop_button.click()
    assert w.stream is None and card.state == tool_steps.STOPPED
    msgs = w.store.messages(w.current)
    assert [m.role for m in msgs] == ["user", "assistant", "tool"]
    assert msgs[2].finish_reason == tool_steps.STOPPED and msgs[2].tool_call_id == msgs[1].tool_calls[0].id
    type_and_enter(w, "And 4 + 4?")  # the chat goes on
    card = asked(qtbot, w)
    card.btn_allow.click()
    wait_reply(qtbot, w)
    assert roles(w) == ["user", "assistant", "tool", "user", "assistant", "tool", "assistant"]


def test_stop_while_a_call_runs_cancels_it(qtbot, window):
    w = window(only="sleep_forever")
    type_and_enter(w, "Wait for me.")
    card = asked(qtbot, w)
    card.btn_allow.click()
    assert card.state == RUNNING
    qtbot.wait(300)
    w.chat.stop_button.click()
    assert w.stream is None and card.state == tool_steps.STOPPED
    assert [m.finish_reason for m in w.store.messages(w.current)][-1] == tool_steps.STOPPED
    qtbot.wait(500)  # a late answer of the cancelled call changes nothing
    assert roles(w) == ["user", "assistant", "tool"]


def test_a_hung_call_times_out_and_the_model_is_told(qtbot, window):
    w = window(only="sleep_forever", tool_timeout_s=1.0)
    type_and_enter(w, "Wait for me.")
    asked(qtbot, w).btn_allow.click()
    wait_reply(qtbot, w)
    msgs = w.store.messages(w.current)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[2].finish_reason == tool_steps.FAILED and "1" in msgs[2].content
    assert any("A tool call failed" in m for m in w.info.messages())
    assert msgs[3].complete


def test_a_crashed_server_gives_an_error_result_and_comes_back(qtbot, window):
    w = window(only="crash")
    type_and_enter(w, "Crash.")
    card = asked(qtbot, w)
    card.btn_allow.click()
    wait_reply(qtbot, w)
    msgs = w.store.messages(w.current)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[2].finish_reason == tool_steps.FAILED and card.state == tool_steps.FAILED
    assert any("A tool call failed" in m for m in w.info.messages())
    # The server is started again, and the next call is asked for as before.
    qtbot.waitUntil(lambda: w.replies.tools.states["calc"].ready, timeout=60_000)
    type_and_enter(w, "Again.")
    asked(qtbot, w).btn_deny.click()
    wait_reply(qtbot, w)
    assert w.replies.tools.states["calc"].ready


def test_allow_always_holds_until_the_servers_tools_change(qtbot, window, tmp_path):
    w = window()
    type_and_enter(w, ASK)
    asked(qtbot, w).btn_always.click()
    wait_reply(qtbot, w)
    assert set(w.settings.tool_allow) == {"calc/add"}
    assert "calc/add" in SettingsFile().load()[0].tool_allow  # kept for the next start
    type_and_enter(w, "And 4 + 4?")
    qtbot.waitUntil(lambda: roles(w).count("tool") == 2, timeout=60_000)  # ran without asking
    wait_reply(qtbot, w)
    last_step = [m for m in w.store.messages(w.current) if m.role == "assistant"][-2]
    (card,) = w.chat.widget(last_step.id).cards()
    assert card.state == tool_steps.DONE
    # The server now offers another tool as well: its list changed, so the user is asked again.
    w.apply_settings(replace(w.settings, mcp_servers=[calc(tmp_path, "add,fail")]))
    qtbot.waitUntil(lambda: len(w.replies.tools.client.tools()) == 2, timeout=60_000)
    type_and_enter(w, "And 1 + 1? Use add.")
    card = asked(qtbot, w)
    card.btn_deny.click()
    wait_reply(qtbot, w)


def test_a_program_that_is_no_server_is_said_and_the_reply_is_written_without_tools(qtbot, window, monkeypatch):
    import app.bridge.mcp_client as mcp_client

    monkeypatch.setattr(mcp_client, "CONNECT_S", 8.0)  # it never answers the handshake: wait less for it
    w = window(ready=False)
    bad = {"name": "junk", "kind": "stdio", "command": sys.executable, "args": ["-c", "print('garbage')"]}
    w.apply_settings(replace(w.settings, mcp_servers=[bad]))
    qtbot.waitUntil(lambda: "junk" in w.replies.tools.states, timeout=60_000)
    assert not w.replies.tools.states["junk"].ready
    qtbot.waitUntil(lambda: any("“junk” cannot be used" in m for m in w.info.messages()), timeout=5_000)
    type_and_enter(w, ASK)
    wait_reply(qtbot, w)
    assert roles(w) == ["user", "assistant"] and w.store.messages(w.current)[1].complete


def test_a_model_that_cannot_call_tools_says_so(qtbot, window):
    w = window(model="bundled")
    type_and_enter(w, ASK)
    wait_reply(qtbot, w)
    msgs = w.store.messages(w.current)
    assert [m.role for m in msgs] == ["user", "assistant"] and not msgs[1].tool_calls
    assert any("MCP tools were not offered" in n for n in msgs[1].metrics["notes"])


def test_a_card_asking_waits_while_the_user_is_in_another_chat(qtbot, window):
    w = window()
    a = w.current
    type_and_enter(w, ASK)
    asked(qtbot, w)
    w.conversations.new_button.click()  # another chat: the call still waits, and nothing runs
    qtbot.waitUntil(lambda: w.replies.tools.pending.card is None, timeout=5_000)  # its card went with the chat
    assert w.current != a and w.chat.message_widgets() == [] and w.stream is not None
    qtbot.wait(300)
    assert [m.role for m in w.store.messages(a)] == ["user", "assistant"]
    w.select_conversation(a)  # back: the same call asks again, on a card drawn anew
    card = asked(qtbot, w)
    assert len(step_cards(w)) == 1  # drawn once, not twice
    card.btn_allow.click()
    wait_reply(qtbot, w)
    assert roles(w) == ["user", "assistant", "tool", "assistant"] and step_cards(w)[0].state == tool_steps.DONE


def test_stop_in_another_chat_saves_the_waiting_call(qtbot, window):
    w = window()
    a = w.current
    type_and_enter(w, ASK)
    asked(qtbot, w)
    w.conversations.new_button.click()
    qtbot.waitUntil(lambda: w.replies.tools.pending.card is None, timeout=5_000)
    assert w.chat.stop_button.isVisibleTo(w)  # the reply elsewhere can be stopped from here
    w.chat.stop_button.click()
    assert w.stream is None
    assert [m.finish_reason for m in w.store.messages(a)][-1] == tool_steps.STOPPED
    w.select_conversation(a)
    assert [c.state for c in step_cards(w)] == [tool_steps.STOPPED]

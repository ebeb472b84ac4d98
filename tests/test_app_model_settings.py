"""Each model's own settings in the real window: the loaded model's recommendations and the user's settings for
it reach the sampler (checked on the SamplingParams each reply's job carries), switch when the model does, a
chat's own settings stay with the chat, and they survive a restart."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.bridge.engine_host import EngineHost
from app.core.model_defaults import with_yours
from app.core.settings import SettingsFile
from app.window.main_window import MainWindow
from gguf_copy import QWEN3_SAMPLING, with_metadata
from test_app_window import type_and_enter, wait_reply


@pytest.fixture(scope="module")
def thinking_gguf(bundled_path, tmp_path_factory):
    return with_metadata(Path(bundled_path), tmp_path_factory.mktemp("win") / "qwen3-like.gguf", QWEN3_SAMPLING)


@pytest.fixture
def jobs(monkeypatch):
    """Every reply job the window hands the engine thread (the real host runs each)."""
    seen = []
    real = EngineHost.generate
    monkeypatch.setattr(EngineHost, "generate", lambda self, job: seen.append(job) or real(self, job))
    return seen


def switch(qtbot, w: MainWindow, model: str, source: str) -> None:
    w.apply_settings(replace(w.settings, model=model, source=source))
    qtbot.waitUntil(lambda: w.host.ready and w.host.identity.key is not None, timeout=60_000)


def ask(qtbot, w: MainWindow, text: str = "Hi"):
    type_and_enter(w, text)
    wait_reply(qtbot, w)


def test_switching_models_switches_their_settings(qtbot, make_window, jobs, thinking_gguf):
    w = make_window(max_tokens=24)  # Hearth's defaults as the user set them: greedy, 24 tokens
    ask(qtbot, w)
    assert (jobs[-1].params.temperature, jobs[-1].params.top_k, jobs[-1].params.max_tokens) == (0.0, 40, 24)
    switch(qtbot, w, str(thinking_gguf), "gguf")
    assert w.host.identity.recommended.values["temperature"] == 0.6
    ask(qtbot, w)
    p = jobs[-1].params
    assert (p.temperature, p.top_k, p.top_p, p.repeat_penalty, p.max_tokens) == (0.6, 20, 0.95, 1.05, 24)
    w._adopt_settings(with_yours(w.settings, w.host.identity, {"max_tokens": 5, "temperature": 0.2}))
    ask(qtbot, w)
    assert (jobs[-1].params.temperature, jobs[-1].params.max_tokens, jobs[-1].params.top_k) == (0.2, 5, 20)
    switch(qtbot, w, "bundled", "bundled")
    ask(qtbot, w)
    assert (jobs[-1].params.temperature, jobs[-1].params.top_k, jobs[-1].params.max_tokens) == (0.0, 40, 24)
    saved, notice = SettingsFile().load()  # kept by the model file's content, and on disk
    assert notice is None and [e.values for e in saved.models.values()] == [{"max_tokens": 5, "temperature": 0.2}]


def test_a_chat_s_own_settings_stay_with_the_chat(qtbot, make_window, jobs, thinking_gguf):
    w = make_window(max_tokens=24)
    first = w.current
    chat_menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Chat")
    assert "This chat's &settings…" in [a.text() for a in chat_menu.actions()]
    with pytest.raises(ValueError, match="top_p must be in"):
        w.replies.reply_settings.save_chat_settings(first, {"top_p": 0})
    with pytest.raises(ValueError, match="'system_prompt' is not a setting here"):
        w.replies.reply_settings.save_chat_settings(first, {"system_prompt": "the chat has its own field"})
    assert w.store.conversation(first).settings == {}  # refused: nothing kept
    w.replies.reply_settings.save_chat_settings(first, {"max_tokens": 3, "temperature": 0.9})
    ask(qtbot, w)
    assert (jobs[-1].params.max_tokens, jobs[-1].params.temperature) == (3, 0.9)
    w.new_conversation()
    ask(qtbot, w)
    assert (jobs[-1].params.max_tokens, jobs[-1].params.temperature) == (24, 0.0)
    switch(qtbot, w, str(thinking_gguf), "gguf")
    w.select_conversation(first)
    ask(qtbot, w)
    assert (jobs[-1].params.max_tokens, jobs[-1].params.temperature, jobs[-1].params.top_k) == (3, 0.9, 20)


def test_the_model_s_system_prompt_turns_and_context(qtbot, make_window, jobs, thinking_gguf):
    w = make_window(max_tokens=4)
    switch(qtbot, w, str(thinking_gguf), "gguf")
    turns = [{"role": "user", "content": "Is Toronto in Canada?"}, {"role": "assistant", "content": "yes"}]
    w._adopt_settings(with_yours(w.settings, w.host.identity, {"system_prompt": "Answer in French.",
                                                                 "messages": turns, "context": 1024}))
    ask(qtbot, w, "Is Ontario in Canada?")
    assert [(m.role, m.content) for m in jobs[-1].messages] == [
        ("system", "Answer in French."), ("user", "Is Toronto in Canada?"), ("assistant", "yes"),
        ("user", "Is Ontario in Canada?")]
    w.store.set_system_prompt(w.current, "Be brief.")  # a chat's own system prompt wins
    ask(qtbot, w, "And Quebec?")
    assert jobs[-1].messages[0].content == "Be brief."
    switch(qtbot, w, "bundled", "bundled")
    assert w.host.model.n_ctx != 1024
    switch(qtbot, w, str(thinking_gguf), "gguf")  # its own context applies when it loads
    assert w.host.model.n_ctx == 1024


def test_the_window_s_api_uses_the_model_s_settings(qtbot, data_dir, monkeypatch, thinking_gguf):
    import socket

    import httpx
    import openai

    from app.core.settings import Settings
    from engine.serve.runtime.scheduler import Scheduler

    given = []
    real = Scheduler.submit
    monkeypatch.setattr(Scheduler, "submit", lambda self, req: given.append(req.params) or real(self, req))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = Settings(model=str(thinking_gguf), source="gguf", server_enabled=True, server_port=port)
    s.sampling.update(presence_penalty=0.5)
    SettingsFile().save(s)
    w = MainWindow()
    try:
        w.show()
        w.start()
        qtbot.waitUntil(lambda: w.host.ready and w.server_host.running and w.server_host.server.model_id
                        is not None, timeout=60_000)
        w._adopt_settings(with_yours(w.settings, w.host.identity, {"max_tokens": 4}))
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=120)
        mid = w.server_host.server.model_id
        client.chat.completions.create(model=mid, messages=[{"role": "user", "content": "Hi"}])
        p = given[-1]
        assert (p.temperature, p.top_k, p.max_tokens, p.presence_penalty) == (0.6, 20, 4, 0.5)
        card = httpx.get(f"http://127.0.0.1:{port}/v1/models/{mid}").json()["hearth_settings"]["settings"]
        assert card["max_tokens"] == {"value": 4, "layer": "yours"}
        assert card["presence_penalty"] == {"value": 0.5, "layer": "hearth"}
        assert card["temperature"] == {"value": 0.6, "layer": "model"}
    finally:
        w.close()


def test_the_model_s_think_default_and_its_tools(qtbot, make_window, jobs, bundled_path, tmp_path):
    """A thinking model (the bundled weights wearing Qwen3's template) thinks or not by its own default until a
    chat chooses; a model offered no MCP server's tools is given none (the tests' MCP server)."""
    import sys

    from app.core.settings import Settings
    from test_app_think import TEMPLATES, with_template

    template = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
    qwen3 = with_template(Path(bundled_path), tmp_path / "qwen3.gguf", template)
    calc = {"name": "calc", "kind": "stdio", "command": sys.executable,
            "args": [str(Path(__file__).parent / "mcp_server.py"), "stdio", str(tmp_path), "--only", "add"]}
    s = Settings(model=str(qwen3), mcp_servers=[calc])
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 4})
    SettingsFile().save(s)
    w = make_window(write=False)
    qtbot.waitUntil(lambda: "calc" in w.replies.tools.states and w.replies.tools.states["calc"].ready,
                    timeout=60_000)
    assert [o.name for o in w.replies.tools.offer(0)[0].tools] == ["add"]
    w._adopt_settings(with_yours(w.settings, w.host.identity, {"think": False, "tools": []}))
    assert w.replies.tools.offer(0)[0].tools == ()
    ask(qtbot, w)
    assert jobs[-1].template_kwargs == {"enable_thinking": False} and jobs[-1].tools == ()
    w.replies.reply_settings.think_chosen(True)  # the chat's own choice wins over the model's default
    ask(qtbot, w)
    assert jobs[-1].template_kwargs == {"enable_thinking": True}

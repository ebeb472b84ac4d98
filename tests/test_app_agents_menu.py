"""The Agents menu (issue #43): an agent starts in a terminal against the window's own server.

Real processes stand in for what a test machine has no screen or account for: a terminal program
(first on the PATH, as x-terminal-emulator) that runs what it is given, and an "agent" installed
where Hearth looks for agents (node_modules/.bin under the cache folder) that does what an agent
does first: reads the settings it was started with and sends one request to the base URL with
the key. The real agents against the real server are ``python -m engine bench agents``.
"""
from __future__ import annotations

import json
import socket
import sys
import textwrap

import pytest

from app.core.agent_terminal import context_warning, launcher_script
from app.core.settings import Settings, SettingsFile

AGENT = textwrap.dedent("""\
    #!{python}
    import json, os, sys, urllib.request
    env = {{k: os.environ.get(k) for k in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_MODEL")}}
    req = urllib.request.Request(env["ANTHROPIC_BASE_URL"] + "/v1/messages", method="POST",
        data=json.dumps({{"model": env["ANTHROPIC_MODEL"], "max_tokens": 4,
                          "messages": [{{"role": "user", "content": "Hi"}}]}}).encode(),
        headers={{"x-api-key": env["ANTHROPIC_AUTH_TOKEN"], "content-type": "application/json"}})
    with urllib.request.urlopen(req, timeout=120) as r:
        reply = json.load(r)
    with open({out!r}, "w") as f:
        json.dump({{"env": env, "cwd": os.getcwd(), "argv": sys.argv[1:], "reply": reply["type"]}}, f)
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_machine(tmp_path, monkeypatch):
    """A terminal on the PATH and Claude Code "installed" for Hearth; where the agent writes what it saw."""
    bin_dir, cache = tmp_path / "bin", tmp_path / "cache"
    bin_dir.mkdir()
    term = bin_dir / "x-terminal-emulator"
    term.write_text('#!/bin/sh\n[ "$1" = "-e" ] && shift\nexec sh "$@"\n')
    term.chmod(0o755)
    agents = cache / "hearth" / "agents" / "node_modules" / ".bin"
    agents.mkdir(parents=True)
    out = tmp_path / "agent-saw.json"
    (agents / "claude").write_text(AGENT.format(python=sys.executable, out=str(out)))
    (agents / "claude").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return out


def test_an_agent_starts_in_a_terminal_on_the_windows_server(qtbot, make_window, data_dir, fake_machine, tmp_path):
    port = free_port()
    s = Settings(server_port=port, server_api_key="k-agents-1")
    s.sampling.update({"temperature": 0.0, "max_tokens": 8})
    SettingsFile().save(s)
    w = make_window(write=False)
    assert not w.server_host.running  # off, as settings had it
    work = tmp_path / "project"
    work.mkdir()
    w.agents.pick_folder = lambda: str(work)
    assert w.agents.actions["claude"].text() == "Start Claude Code…"
    w.agents.actions["claude"].trigger()
    assert w.server_host.running and w.settings.server_enabled  # turned on for the agent, on loopback
    assert w.server_host.server.host == "127.0.0.1"
    qtbot.waitUntil(fake_machine.exists, timeout=120_000)
    qtbot.waitUntil(lambda: fake_machine.stat().st_size > 0, timeout=10_000)
    saw = json.loads(fake_machine.read_text())
    assert saw["env"] == {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}", "ANTHROPIC_AUTH_TOKEN": "k-agents-1",
                          "ANTHROPIC_MODEL": w.server_host.server.model_id}
    assert saw["cwd"] == str(work) and saw["reply"] == "message"  # the window's server answered it
    assert w.agents.last.script.stat().st_mode & 0o077 == 0  # the script holds the key: the user's alone
    assert any("Claude Code started" in m for m in w.info.messages())


def test_a_missing_agent_says_how_to_install_it(qtbot, make_window, data_dir, fake_machine, tmp_path):
    w = make_window()
    w.agents.pick_folder = lambda: str(tmp_path)
    assert w.agents.start("codex") is False
    assert any("npm install -g @openai/codex" in m for m in w.info.messages())


def test_no_model_no_start(qtbot, make_window, data_dir, fake_machine):
    w = make_window(start=False)
    assert w.agents.start("claude") is False
    assert any("Load a model first" in m for m in w.info.messages())


def test_a_small_context_is_named_before_the_agent_starts(tmp_path):
    assert "20,000 tokens" in context_warning("claude", 8192) and context_warning("claude", 32768) is None
    script = launcher_script("opencode", "http://127.0.0.1:9", "k 'quoted'", "m", tmp_path, "/bin/true", tmp_path)
    text = script.read_text()
    assert "export HEARTH_API_KEY='k '\"'\"'quoted'\"'\"''" in text and f"cd {tmp_path}" in text

"""Real MCP servers from PyPI (issue #43): mcp-server-time, mcp-server-git on a scratch repository and
mcp-server-fetch pointed at a local HTTP server (its proxy: nothing reaches the internet), started as
Settings → Tools' "Add a known server" starts them. Their tools are offered whole (every schema
accepted), and in the real window (offscreen) a call runs after Allow and the reply answers with it."""
from __future__ import annotations

import http.server
import shlex
import subprocess
import threading

import pytest

from app.bridge.mcp_client import McpClient
from app.core import known_servers, tool_steps
from app.core.mcp_servers import McpServer

WAIT = 60
PAGE = ("<html><head><title>Hearth test page</title></head><body><h1>Lighthouse</h1>"
        "<p>The keeper is Ada.</p></body></html>")


def known(name: str, folder: str = "") -> McpServer:
    k = next(k for k in known_servers.KNOWN if k.name == name)
    program, args, note = known_servers.command_for(k, folder)
    assert note == "", note  # installed beside Hearth by the test set-up
    return McpServer(name, "stdio", command=program, args=tuple(args))


class _Page(http.server.BaseHTTPRequestHandler):
    """Answers every request, absolute-URI proxy requests included, with PAGE (and allows robots)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"User-agent: *\nAllow: /\n" if self.path.endswith("/robots.txt") else PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain" if self.path.endswith("robots.txt") else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_a) -> None:
        pass


@pytest.fixture
def page():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@example.org"], ["config", "user.name", "T"]):
        subprocess.run(["git", *args], cwd=r, check=True)
    (r / "notes.md").write_text("# Notes\n")
    subprocess.run(["git", "add", "."], cwd=r, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "First notes"], cwd=r, check=True)
    return r


@pytest.fixture
def client():
    c = McpClient()
    yield c
    c.close()


def connected(client: McpClient, server: McpServer):
    states = client.connect([server]).result(WAIT)
    assert states[server.name].ready, states[server.name]
    return [t for t in client.tools() if t.server == server.name]


def test_the_known_servers_start_here_and_every_schema_is_accepted(client, repo, page):
    servers = [known("time"), known("git", str(repo)),
               McpServer("fetch", "stdio", command=known("fetch").command,
                         args=(*known("fetch").args, "--proxy-url", page, "--ignore-robots-txt"))]
    for s in servers:
        tools = connected(client, s)
        assert tools, s.name
        offer = tool_steps.offer(tools)
        assert offer.left_out == () and len(offer.tools) == len(tools)  # every real schema is taken
    fetch = next(t for t in client.tools() if t.server == "fetch" and t.name == "fetch")
    limit = fetch.schema["properties"]["max_length"]
    assert "exclusiveMinimum" in limit or "minimum" in limit  # the keywords that were a 400 before


def test_each_real_server_answers_a_call(client, repo, page):
    connected(client, known("time"))
    r = client.call("time", "get_current_time", {"timezone": "Europe/Rome"}, WAIT).result(WAIT)
    assert not r.error and "Europe/Rome" in r.text
    connected(client, known("git", str(repo)))
    r = client.call("git", "git_log", {"repo_path": str(repo)}, WAIT).result(WAIT)
    assert not r.error and "First notes" in r.text
    fetch = McpServer("fetch", "stdio", command=known("fetch").command,
                      args=(*known("fetch").args, "--proxy-url", page, "--ignore-robots-txt"))
    connected(client, fetch)
    r = client.call("fetch", "fetch", {"url": "http://example.invalid/keeper"}, WAIT).result(WAIT)
    assert not r.error and "Ada" in r.text  # served by the local page through the proxy


def test_settings_fill_in_a_known_server(qtbot):
    from app.core.settings import Settings
    from app.settings_ui.settings_tools_tab import ToolsTab

    tab = ToolsTab(Settings())
    qtbot.addWidget(tab)
    i = next(i for i in range(tab.known.count()) if tab.known.itemData(i) is not None
             and tab.known.itemData(i).name == "time")
    tab.pick_known(i)
    assert tab.name.text() == "time" and "mcp_server_time" in tab.where.text()
    where = tab.where.text()
    assert tab.add_server()
    added = tab.values()["mcp_servers"][0]
    assert added["name"] == "time" and [added["command"], *added["args"]] == shlex.split(where)


@pytest.mark.parametrize("name", ["time", "git", "fetch"])
def test_a_real_server_in_the_window(qtbot, make_window, qwen_coder_small, repo, page, name):
    """Qwen2.5-Coder-0.5B (real weights and template) asks; the user allows; the real server answers;
    the reply answers with what the server said."""
    from app.core.settings import Settings, SettingsFile
    from test_app_tool_calls import asked
    from test_app_window import type_and_enter, wait_reply

    server = {"time": known("time"), "git": known("git", str(repo)),
              "fetch": McpServer("fetch", "stdio", command=known("fetch").command,
                                 args=(*known("fetch").args, "--proxy-url", page, "--ignore-robots-txt"))}[name]
    s = Settings(model=str(qwen_coder_small), context=4096, mcp_servers=[server.as_dict()], tool_choice="required",
                 max_tool_calls=1)
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 200})  # a whole call, arguments and all
    SettingsFile().save(s)
    w = make_window(write=False)
    qtbot.waitUntil(lambda: name in w.replies.tools.states and w.replies.tools.states[name].ready, timeout=WAIT * 1000)
    ask = {"time": "What is the current time in the Europe/Rome timezone?",
           "git": f"Show the commit log of the git repository at {repo}",
           "fetch": "Fetch http://example.invalid/keeper and tell me who the keeper is."}[name]
    type_and_enter(w, ask)
    card = asked(qtbot, w)
    assert card.server == name
    card.btn_allow.click()
    wait_reply(qtbot, w, timeout=180_000)
    msgs = w.store.messages(w.current)
    assert [m.role for m in msgs][:1] == ["user"] and msgs[-1].role == "assistant" and msgs[-1].content
    result = next(m for m in msgs if m.role == "tool").content
    # What the real server answered, not an error: the call named the right tool with the right arguments.
    assert {"time": "Europe/Rome", "git": "First notes", "fetch": "Ada"}[name] in result, result[:300]

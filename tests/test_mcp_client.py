"""app/bridge/mcp_client.py against a real MCP server (tests/mcp_server.py, written with the SDK),
run as a stdio subprocess and over Streamable HTTP on 127.0.0.1."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.bridge.mcp_client import McpClient
from app.core.mcp_servers import McpServer

SERVER = str(Path(__file__).parent / "mcp_server.py")
WAIT = 60


def stdio_server(root: Path, name: str = "calc") -> McpServer:
    return McpServer(name, "stdio", command=sys.executable, args=(SERVER, "stdio", str(root)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def root(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "note.txt").write_text("grüß dich", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("do not read", encoding="utf-8")
    return tmp_path / "shared"


@pytest.fixture
def http_url(root):
    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "http", str(root), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + WAIT
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def client():
    c = McpClient()
    yield c
    c.close()


def test_lists_and_calls_over_stdio(client, root):
    states = client.connect([stdio_server(root)]).result(WAIT)
    assert states["calc"].ready, states["calc"].error
    names = {t.name for t in client.tools()}
    assert {"add", "read_file", "picture", "fail", "sleep_forever", "crash"} <= names
    add = next(t for t in client.tools() if t.name == "add")
    assert add.server == "calc" and add.description == "Add two whole numbers"
    assert add.schema["required"] == ["a", "b"]
    r = client.call("calc", "add", {"a": 2, "b": 40}, 30).result(WAIT)
    assert (r.text, r.error) == ("42", False) and r.seconds > 0
    assert client.call("calc", "read_file", {"name": "note.txt"}, 30).result(WAIT).text == "grüß dich"


def test_the_file_reader_stays_in_its_folder_and_errors_are_errors(client, root):
    client.connect([stdio_server(root)]).result(WAIT)
    r = client.call("calc", "read_file", {"name": "../secret.txt"}, 30).result(WAIT)
    assert r.error and "outside the shared folder" in r.text and "do not read" not in r.text
    r = client.call("calc", "fail", {}, 30).result(WAIT)
    assert r.error and "always fails" in r.text


def test_images_and_resources_are_described_as_text(client, root):
    client.connect([stdio_server(root)]).result(WAIT)
    r = client.call("calc", "picture", {}, 30).result(WAIT)
    assert r.text.splitlines() == ["[image/png, 32 bytes]", "a note", "done"] and not r.error


def test_a_hung_tool_times_out_and_the_server_still_works(client, root):
    client.connect([stdio_server(root)]).result(WAIT)
    t0 = time.perf_counter()
    r = client.call("calc", "sleep_forever", {}, 1.5).result(WAIT)
    assert r.error and "no answer within 1.5 s" in r.text and time.perf_counter() - t0 < 10
    assert client.call("calc", "add", {"a": 1, "b": 1}, 30).result(WAIT).text == "2"


def test_a_cancelled_call_stops(client, root):
    client.connect([stdio_server(root)]).result(WAIT)
    f = client.call("calc", "sleep_forever", {}, 600)
    time.sleep(0.5)
    assert f.cancel()
    assert client.call("calc", "add", {"a": 3, "b": 4}, 30).result(WAIT).text == "7"


def test_a_crashed_server_gives_an_error_and_comes_back_on_the_next_connect(client, root):
    servers = [stdio_server(root)]
    client.connect(servers).result(WAIT)
    r = client.call("calc", "crash", {}, 30).result(WAIT)
    assert r.error and "may have crashed" in r.text
    r = client.call("calc", "add", {"a": 1, "b": 2}, 30).result(WAIT)
    assert r.error and "cannot be called" in r.text
    assert client.connect(servers).result(WAIT)["calc"].ready   # started again
    assert client.call("calc", "add", {"a": 1, "b": 2}, 30).result(WAIT).text == "3"


def test_a_program_that_is_no_server_says_so(client, root, tmp_path, monkeypatch):
    import app.bridge.mcp_client as mcp_client

    monkeypatch.setattr(mcp_client, "CONNECT_S", 8.0)  # the junk program never answers: wait less for it
    garbage = McpServer("junk", "stdio", command=sys.executable, args=("-c", "print('hello'); import time; "
                                                                          "time.sleep(60)"))
    missing = McpServer("gone", "stdio", command=str(tmp_path / "no-such-program"))
    t0 = time.perf_counter()
    states = client.connect([garbage, missing, stdio_server(root)]).result(WAIT + 30)
    assert states["calc"].ready
    assert states["junk"].error and states["gone"].error
    assert time.perf_counter() - t0 < 40
    assert {t.server for t in client.tools()} == {"calc"}
    assert client.call("gone", "add", {}, 5).result(WAIT).error


def test_a_disabled_server_is_not_started_and_a_removed_one_is_closed(client, root):
    s = stdio_server(root)
    assert client.connect([s]).result(WAIT)["calc"].ready
    assert client.connect([McpServer(s.name, s.kind, s.command, s.args, enabled=False)]).result(WAIT) == {}
    assert client.tools() == []


def test_lists_and_calls_over_streamable_http(client, http_url):
    states = client.connect([McpServer("web", "http", url=http_url)]).result(WAIT)
    assert states["web"].ready, states["web"].error
    assert client.call("web", "add", {"a": 20, "b": 22}, 30).result(WAIT).text == "42"
    r = client.call("web", "sleep_forever", {}, 1).result(WAIT)
    assert r.error and "no answer" in r.text
    assert client.call("web", "read_file", {"name": "note.txt"}, 30).result(WAIT).text == "grüß dich"

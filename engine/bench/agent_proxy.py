"""A recording proxy between a coding agent and Hearth's server: every request is kept (its endpoint,
its headers with secrets taken out, its JSON body) and forwarded; every response streams back as
it comes, with when its first byte came. ``bench agents`` reads what agents ask and get with it, and
``scripts/capture_agents.py`` keeps their requests as test fixtures (tests/fixtures/agents/)."""
from __future__ import annotations

import http.client
import http.server
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..reply_formats.tools import Tool, check_tool

SECRET_HEADERS = ("authorization", "x-api-key", "cookie", "openai-organization", "openai-project")
HOP_HEADERS = ("connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization",
               "proxy-authenticate", "host")
NOT_KEPT = HOP_HEADERS + ("content-length", "accept-encoding")  # left out of a fixture: they vary by run


@dataclass
class Exchange:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0
    started: float = 0.0
    first_byte_s: float | None = None   # request sent -> the response's first body byte
    seconds: float = 0.0
    response: bytes = b""

    def fixture(self) -> dict[str, Any]:
        """The request as a test fixture keeps it."""
        return {"method": self.method, "path": self.path, "headers": self.headers, "body": self.body}


@dataclass
class RecordingProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``upstream`` (http://host:port)."""
    upstream: str
    exchanges: list[Exchange] = field(default_factory=list)

    def __post_init__(self) -> None:
        proxy = self
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_a: Any) -> None:
                pass

            def _any(self) -> None:
                proxy._forward(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _any  # noqa: N815 (http.server's names)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _forward(self, h: http.server.BaseHTTPRequestHandler) -> None:
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n) if n else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): ("<secret>" if k.lower() in SECRET_HEADERS else v) for k, v in h.headers.items()
                   if k.lower() not in NOT_KEPT}
        ex = Exchange(h.command, h.path, headers, body, started=time.perf_counter())
        with self._lock:
            self.exchanges.append(ex)
        up = urlsplit(self.upstream)
        conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port, timeout=3600)
        try:
            conn.request(h.command, h.path, body=raw or None,
                         headers={k: v for k, v in h.headers.items() if k.lower() not in HOP_HEADERS})
            r = conn.getresponse()
            ex.status = r.status
            h.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in HOP_HEADERS + ("content-length",):
                    h.send_header(k, v)
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            while True:
                chunk = r.read1(65536)
                if not chunk:
                    break
                if ex.first_byte_s is None:
                    ex.first_byte_s = time.perf_counter() - ex.started
                ex.response += chunk
                h.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
        except (OSError, http.client.HTTPException) as e:
            ex.status = ex.status or 502
            ex.response += f"proxy: {e}".encode()
        finally:
            ex.seconds = time.perf_counter() - ex.started
            conn.close()


# -- what the recordings offer ---------------------------------------------------------------------

def recorded_request(ex: dict[str, Any]) -> Any:
    """A recorded request (a fixture: method, path, body) checked by the protocol its path names;
    raises the ApiError a client would get as a 400."""
    from ..serve.protocols.anthropic import parse_anthropic
    from ..serve.protocols.openai import parse_openai
    from ..serve.protocols.responses import ResponseStore, parse_responses

    route, body = ex["path"].split("?")[0], ex["body"]
    if route == "/v1/messages":
        return parse_anthropic(body)
    if route == "/v1/responses":
        return parse_responses(body, ResponseStore())
    return parse_openai(body, "chat")


def recorded_tools(fixtures: Path) -> dict[str, tuple[Tool, ...]]:
    """The tools in ``fixtures`` (tests/fixtures): each agent's, from the first of its recorded
    requests (agents/AGENT/NN.json) that offers some, and each MCP server's (mcp/NAME.json), as
    Hearth reads them off the wire."""
    out: dict[str, tuple[Tool, ...]] = {}
    for path in sorted(fixtures.glob("agents/*/*.json")):
        ex = json.loads(path.read_text(encoding="utf-8"))
        if ex.get("method") != "POST" or not isinstance(ex.get("body"), dict) or path.parent.name in out:
            continue
        tools = recorded_request(ex).tools
        if tools:
            out[path.parent.name] = tools
    for path in sorted(fixtures.glob("mcp/*.json")):
        listed = json.loads(path.read_text(encoding="utf-8"))["tools"]
        out[f"mcp-{path.stem}"] = tuple(check_tool({"name": t["name"], "description": t.get("description") or "",
                                                    "parameters": t["inputSchema"]}, f"{path.stem}.{t['name']}")
                                        for t in listed)
    return out

"""The MCP servers' connections, on a thread of their own with its own asyncio loop. Qt-free.

The official SDK (``mcp``) does the protocol: ``stdio_client`` starts a server program
and talks over its stdin/stdout, ``streamable_http_client`` talks to a URL, and a
``ClientSession`` lists the tools and calls them. Each server lives in one task that
holds its connection open (the SDK's context managers must be entered and left in
the same task) until it is closed or replaced.

Everything the window asks returns a ``concurrent.futures.Future`` at once: nothing
here ever blocks the GUI thread. A call has a timeout; a server that crashes, hangs
or answers garbage gives an error ``ToolResult``, never an exception or a hang.
Cancelling a call's future (Stop) cancels the call on the loop.
"""
from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import os
import threading
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from app.core.mcp_servers import McpServer, fingerprint

CONNECT_S = 20.0        # starting a server and listing its tools
RESULT_CHARS = 20_000   # a result longer than this is cut (the model's context is not for megabytes)


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool a server offers: its name, description and input JSON Schema."""
    server: str
    name: str
    description: str
    schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a call gave back, as inert text (``error``: the call failed or the tool said isError)."""
    text: str
    error: bool = False
    seconds: float = 0.0


@dataclass(slots=True)
class ServerState:
    """A server as the window sees it: its tools (and their fingerprint) or why it is not there."""
    server: McpServer
    tools: tuple[McpTool, ...] = ()
    error: str | None = None
    fingerprint: str = ""

    @property
    def ready(self) -> bool:
        return self.error is None and bool(self.fingerprint)


@dataclass(slots=True)
class _Conn:
    server: McpServer
    state: ServerState
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    session: Any = None
    task: asyncio.Task | None = None


def describe(content: Any) -> str:
    """One content block of a result as text: text as it is, an image or a sound as what it is,
    an embedded resource as its text."""
    kind = getattr(content, "type", None)
    if kind == "text":
        return str(content.text)
    if kind in ("image", "audio"):
        try:
            size = len(base64.b64decode(content.data, validate=False))
        except ValueError:
            size = len(content.data)
        return f"[{content.mime_type}, {size} bytes]"
    if kind == "resource":
        r = content.resource
        if hasattr(r, "text"):
            return str(r.text)
        return f"[{r.mime_type or 'binary'} resource {r.uri}, {len(base64.b64decode(r.blob))} bytes]"
    if kind == "resource_link":
        return f"[resource link: {content.uri}]"
    return f"[{kind or 'unknown'} content]"


def result_of(res: Any, seconds: float) -> ToolResult:
    """A CallToolResult as a ToolResult."""
    texts = [describe(c) for c in res.content]
    if not texts and res.structured_content is not None:
        texts = [json.dumps(res.structured_content, ensure_ascii=False)]
    text = "\n".join(texts)
    if len(text) > RESULT_CHARS:
        text = text[:RESULT_CHARS] + f"\n[... cut: the result was {len(text):,} characters]"
    return ToolResult(text, bool(res.is_error), seconds)


class McpClient:
    """The connections to the configured servers (see the module's docstring)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hearth-mcp", daemon=True)
        self._thread.start()
        self._conns: dict[str, _Conn] = {}   # touched on the loop only
        self._lock = threading.Lock()
        self._states: dict[str, ServerState] = {}
        self._errlog = open(os.devnull, "w")  # a server's stderr (its own tracebacks) is not the window's

    # -- what the window calls ------------------------------------------------

    def connect(self, servers: Sequence[McpServer]) -> concurrent.futures.Future[dict[str, ServerState]]:
        """Connect to the enabled ``servers`` (a server already connected with the same set-up is
        kept; one that failed or changed is started again; one no longer listed is closed)."""
        return asyncio.run_coroutine_threadsafe(self._connect_all(list(servers)), self._loop)

    def states(self) -> dict[str, ServerState]:
        """The servers as of the last connect (a copy, safe on any thread)."""
        with self._lock:
            return dict(self._states)

    def tools(self) -> list[McpTool]:
        """Every tool of every connected server."""
        return [t for s in self.states().values() if s.ready for t in s.tools]

    def call(self, server: str, tool: str, arguments: Mapping[str, Any],
             timeout_s: float) -> concurrent.futures.Future[ToolResult]:
        """Call ``tool`` on ``server``; the future's result is always a ToolResult (cancel it to stop)."""
        return asyncio.run_coroutine_threadsafe(self._call(server, tool, dict(arguments), timeout_s), self._loop)

    def close(self) -> None:
        """Close every connection (a stdio server's process ends) and the loop."""
        if self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._connect_all([]), self._loop).result(timeout=10)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
        self._errlog.close()

    # -- on the loop ---------------------------------------------------------------

    async def _connect_all(self, servers: list[McpServer]) -> dict[str, ServerState]:
        wanted = {s.name: s for s in servers if s.enabled}
        for name, conn in list(self._conns.items()):
            if wanted.get(name) != conn.server or conn.state.error is not None:
                await self._close(conn)
                del self._conns[name]
        ready = []
        for name, s in wanted.items():
            if name not in self._conns:
                conn = _Conn(s, ServerState(s))
                started = self._loop.create_future()
                conn.task = asyncio.create_task(self._serve(conn, started), name=f"mcp-{name}")
                self._conns[name] = conn
                ready.append(started)
        if ready:
            await asyncio.wait(ready, timeout=CONNECT_S + 5)
        with self._lock:
            self._states = {n: c.state for n, c in self._conns.items()}
        return self.states()

    async def _close(self, conn: _Conn) -> None:
        conn.stop.set()
        if conn.task is not None:
            try:
                await asyncio.wait_for(conn.task, 10)
            except (asyncio.TimeoutError, Exception):
                conn.task.cancel()

    async def _serve(self, conn: _Conn, started: asyncio.Future) -> None:
        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        s = conn.server
        try:
            async with AsyncExitStack() as stack:
                if s.kind == "stdio":
                    params = StdioServerParameters(command=s.command, args=list(s.args))
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=self._errlog))
                else:
                    read, write = await stack.enter_async_context(streamable_http_client(s.url))
                session = await stack.enter_async_context(ClientSession(read, write))
                await asyncio.wait_for(session.initialize(), CONNECT_S)
                listed = await asyncio.wait_for(session.list_tools(), CONNECT_S)
                tools = tuple(McpTool(s.name, t.name, t.description or "", dict(t.input_schema))
                              for t in listed.tools)
                conn.session = session
                conn.state = ServerState(s, tools, None, fingerprint(tools))
                started.set_result(None)
                await conn.stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # a program that will not start, a URL that does not answer...
            conn.state = ServerState(s, error=_why(e) if not started.done() else f"disconnected: {_why(e)}")
        finally:
            conn.session = None
            if not started.done():
                if conn.state.error is None:
                    conn.state = ServerState(s, error="the server did not answer")
                started.set_result(None)

    async def _call(self, server: str, tool: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        t0 = time.perf_counter()
        conn = self._conns.get(server)
        if conn is None or conn.session is None or conn.state.error is not None:
            why = conn.state.error if conn is not None and conn.state.error else "it is not connected"
            return ToolResult(f"the server {server!r} cannot be called: {why}", True)
        try:
            res = await asyncio.wait_for(conn.session.call_tool(tool, arguments), timeout_s)
        except asyncio.TimeoutError:
            return ToolResult(f"{server}'s tool {tool} gave no answer within {timeout_s:g} s",
                              True, time.perf_counter() - t0)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the connection closed (the server crashed), or it answered garbage
            why = _why(e)
            if "closed" in why.lower():
                conn.state = ServerState(conn.server, error=f"disconnected: {why}")
                with self._lock:
                    self._states[server] = conn.state
                why = f"the server closed the connection ({why}); it may have crashed"
            return ToolResult(f"{server}'s tool {tool} failed: {why}", True, time.perf_counter() - t0)
        return result_of(res, time.perf_counter() - t0)


def _why(e: BaseException) -> str:
    """One line for a failure, looking inside the SDK's exception groups."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return str(e) or type(e).__name__

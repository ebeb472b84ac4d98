"""A small real MCP server for the tests, written with the official SDK.

Run as ``python tests/mcp_server.py stdio ROOT`` (a stdio subprocess) or
``python tests/mcp_server.py http ROOT PORT`` (Streamable HTTP on 127.0.0.1).
``ROOT`` is the one folder ``read_file`` may read. Tools: ``add`` (a
calculator), ``read_file`` (confined to ROOT), ``picture`` (an image and a text
resource), ``fail`` (a result with isError), ``sleep_forever`` (hangs) and
``crash`` (ends the process mid-call). ``--only a,b`` at the end keeps only those tools
(so a test can leave a model one tool to call).
"""
from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import EmbeddedResource, ImageContent, TextContent, TextResourceContents

TOOLS = ("add", "read_file", "picture", "fail", "sleep_forever", "crash")
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(24)).decode()


def build(root: Path) -> MCPServer:
    server = MCPServer("hearth-test")

    @server.tool(description="Add two whole numbers")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Read a text file from the shared folder")
    def read_file(name: str) -> str:
        path = (root / name).resolve()
        if root.resolve() not in path.parents:
            raise ToolError(f"{name!r} is outside the shared folder")
        return path.read_text(encoding="utf-8")

    @server.tool(description="A picture and a note")
    def picture() -> list[ImageContent | EmbeddedResource | TextContent]:
        return [ImageContent(data=PNG, mime_type="image/png"),
                EmbeddedResource(resource=TextResourceContents(uri="note://1", text="a note")),
                TextContent(text="done")]

    @server.tool(description="Always fails")
    def fail() -> str:
        raise ToolError("this tool always fails")

    @server.tool(description="Never answers")
    async def sleep_forever() -> str:
        await asyncio.sleep(3600)
        return "woke up"

    @server.tool(description="Ends the server process")
    def crash() -> str:
        os._exit(3)

    return server


if __name__ == "__main__":
    argv = sys.argv[1:]
    only = argv[argv.index("--only") + 1].split(",") if "--only" in argv else None
    argv = argv[:argv.index("--only")] if "--only" in argv else argv
    kind, root = argv[0], Path(argv[1])
    srv = build(root)
    if only is not None:
        for name in TOOLS:
            if name not in only:
                srv.remove_tool(name)
    if kind == "stdio":
        srv.run("stdio")
    else:
        srv.run("streamable-http", host="127.0.0.1", port=int(argv[2]))

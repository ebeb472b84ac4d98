"""The MCP servers whose tools the window may call, and the rules for calling them. Qt-free.

They are kept with the other settings (app/core/settings.py reads, checks and writes
them): ``mcp_servers`` is a list of entries, none by default, each

    {"name": "files", "kind": "stdio", "command": "uvx", "args": ["mcp-server-files"], "enabled": true}
    {"name": "web", "kind": "http", "url": "http://127.0.0.1:8000/mcp", "enabled": true}

An ``http`` URL whose host is not this machine (localhost, 127.0.0.1, ::1) also needs
``"remote_ok": true``, which Settings sets only after asking the user.

``tool_allow`` is what "Allow always" remembered: ``"server/tool"`` -> the fingerprint of
that server's tool list when the user said so. When the server's list changes (a new
tool, another description or schema) the fingerprint no longer matches and the user is
asked again.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

KINDS = ("stdio", "http")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
TOOL_CHOICES = ("auto", "required")  # the first step of a reply: the model decides, or it must call a tool
MAX_TOOL_CALLS = 10                  # calls one reply may make, by default
TOOL_TIMEOUT_S = 60.0                # one call's limit, by default
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_ .-]{0,39}")


@dataclass(frozen=True, slots=True)
class McpServer:
    """One configured server: a ``stdio`` command (with its arguments) or a Streamable ``http`` URL."""
    name: str
    kind: str
    command: str = ""
    args: tuple[str, ...] = ()
    url: str = ""
    enabled: bool = True
    remote_ok: bool = False  # an http URL on another machine that the user confirmed

    @property
    def remote(self) -> bool:
        """An http URL whose host is not this machine."""
        return self.kind == "http" and not is_local_url(self.url)

    def where(self) -> str:
        """What the server is, in one line (the command line, or the URL)."""
        return " ".join([self.command, *self.args]) if self.kind == "stdio" else self.url

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind, "enabled": self.enabled}
        if self.kind == "stdio":
            d.update(command=self.command, args=list(self.args))
        else:
            d["url"] = self.url
            if self.remote_ok:
                d["remote_ok"] = True
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "mcp_servers[0]") -> McpServer:
        """An entry as a server; ValueError names the field (``mcp_servers[2].url: ...``)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"{where}: must be an object with a name, a kind and a command or url")
        name, kind, enabled = d.get("name"), d.get("kind"), d.get("enabled", True)
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(f"{where}.name: 1-40 letters, digits, spaces, _ . or - (no /), got {name!r}")
        if kind not in KINDS:
            raise ValueError(f"{where}.kind: must be stdio or http, got {kind!r}")
        if not isinstance(enabled, bool):
            raise ValueError(f"{where}.enabled: must be true or false, got {enabled!r}")
        if kind == "stdio":
            command, args = d.get("command"), d.get("args", [])
            if not isinstance(command, str) or not command.strip():
                raise ValueError(f"{where}.command: the program to run is missing")
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ValueError(f"{where}.args: must be a list of texts")
            return cls(name, kind, command=command, args=tuple(args), enabled=enabled)
        url, remote_ok = d.get("url"), d.get("remote_ok", False)
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            raise ValueError(f"{where}.url: must be an http:// or https:// address, got {url!r}")
        if not isinstance(remote_ok, bool):
            raise ValueError(f"{where}.remote_ok: must be true or false, got {remote_ok!r}")
        server = cls(name, kind, url=url, enabled=enabled, remote_ok=remote_ok)
        if server.remote and not remote_ok:
            raise ValueError(f"{where}.url: {urlsplit(url).hostname} is another machine; add it again in "
                             "Settings → Tools and confirm it")
        return server


def is_local_url(url: str) -> bool:
    """Whether ``url``'s host is this machine."""
    try:
        return urlsplit(url).hostname in LOCAL_HOSTS
    except ValueError:
        return False


def servers(raw: Sequence[Mapping[str, Any]]) -> list[McpServer]:
    """The settings' entries as servers (they were checked when the settings loaded)."""
    return [McpServer.from_dict(d, f"mcp_servers[{i}]") for i, d in enumerate(raw)]


def servers_problem(raw: Any) -> str | None:
    """The first thing wrong with the ``mcp_servers`` setting, as "field: rule" (None: all valid)."""
    if not isinstance(raw, list):
        return "mcp_servers: must be a list of servers"
    try:
        names = [s.name for s in servers(raw)]
    except ValueError as e:
        return str(e)
    if len(set(names)) != len(names):
        return "mcp_servers: two servers have the same name"
    return None


def valid_servers(raw: Any, problems: list[str]) -> list[dict[str, Any]]:
    """The entries of ``raw`` that are valid, each name once; one message per entry left out."""
    if not isinstance(raw, list):
        problems.append("mcp_servers: must be a list of servers")
        return []
    out: list[dict[str, Any]] = []
    for i, d in enumerate(raw):
        try:
            s = McpServer.from_dict(d, f"mcp_servers[{i}]")
        except ValueError as e:
            problems.append(f"{e} (that server was left out)")
            continue
        if any(o["name"] == s.name for o in out):
            problems.append(f"mcp_servers[{i}].name: a second server called {s.name!r} was left out")
            continue
        out.append(d)
    return out


def tools_problem(allow: Any, max_calls: Any, timeout_s: Any, choice: Any) -> str | None:
    """The first invalid tool-calling setting as "field: rule" (None: all valid)."""
    if not isinstance(allow, dict) or not all(isinstance(k, str) and "/" in k and isinstance(v, str)
                                              for k, v in allow.items()):
        return "tool_allow: must map server/tool to the fingerprint of the server's tools"
    if not isinstance(max_calls, int) or isinstance(max_calls, bool) or not 1 <= max_calls <= 100:
        return f"max_tool_calls: must be a whole number from 1 to 100, got {max_calls!r}"
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or not 1 <= timeout_s <= 3600:
        return f"tool_timeout_s: must be a number of seconds from 1 to 3600, got {timeout_s!r}"
    if choice not in TOOL_CHOICES:
        return f"tool_choice: must be one of {', '.join(TOOL_CHOICES)}, got {choice!r}"
    return None


def allow_key(server: str, tool: str) -> str:
    return f"{server}/{tool}"


def fingerprint(tools: Sequence[Any]) -> str:
    """The identity of a server's tool list (each tool's name, description and schema)."""
    rows = sorted([t.name, t.description, t.schema] for t in tools)
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]


def always_allowed(allow: Mapping[str, str], server: str, tool: str, server_fingerprint: str) -> bool:
    """Whether "Allow always" holds for ``tool`` on ``server`` with its tool list as it is now."""
    return allow.get(allow_key(server, tool)) == server_fingerprint

"""The MCP servers and the tool-calling rules in the settings (app/core/mcp_servers.py)."""
from __future__ import annotations

import json
import re

import pytest

from app.core import mcp_servers
from app.core.mcp_servers import McpServer
from app.core.settings import Settings, SettingsError, SettingsFile

STDIO = {"name": "calc", "kind": "stdio", "command": "python3", "args": ["server.py"], "enabled": True}
HTTP = {"name": "web", "kind": "http", "url": "http://127.0.0.1:8000/mcp", "enabled": False}


def test_no_server_is_configured_by_default():
    s = Settings()
    assert s.mcp_servers == [] and s.tool_allow == {} and s.max_tool_calls == 10 and s.tool_choice == "auto"


def test_servers_round_trip_through_the_file(tmp_path):
    f = SettingsFile(tmp_path / "settings.json")
    f.save(Settings(mcp_servers=[STDIO, HTTP], tool_allow={"calc/add": "abc"}, max_tool_calls=3))
    s, msg = f.load()
    assert msg is None
    assert [x.where() for x in mcp_servers.servers(s.mcp_servers)] == ["python3 server.py", HTTP["url"]]
    assert s.tool_allow == {"calc/add": "abc"} and s.max_tool_calls == 3


@pytest.mark.parametrize("entry, field", [
    ({**STDIO, "command": ""}, "mcp_servers[0].command"),
    ({**STDIO, "args": "server.py"}, "mcp_servers[0].args"),
    ({**STDIO, "kind": "sse"}, "mcp_servers[0].kind"),
    ({**STDIO, "name": "a/b"}, "mcp_servers[0].name"),
    ({**HTTP, "url": "ftp://host/x"}, "mcp_servers[0].url"),
    ({**HTTP, "url": "http://example.com/mcp"}, "mcp_servers[0].url"),   # another machine, not confirmed
    ({**HTTP, "enabled": "yes"}, "mcp_servers[0].enabled"),
])
def test_a_bad_entry_is_refused_naming_its_field(entry, field):
    with pytest.raises(SettingsError, match="^" + re.escape(field) + ":"):
        Settings(mcp_servers=[entry]).validate()


def test_another_machine_needs_the_confirmation_flag():
    remote = {**HTTP, "url": "https://tools.example.com/mcp"}
    with pytest.raises(SettingsError, match="another machine"):
        Settings(mcp_servers=[remote]).validate()
    s = Settings(mcp_servers=[{**remote, "remote_ok": True}]).validate()
    [server] = mcp_servers.servers(s.mcp_servers)
    assert server.remote and server.remote_ok
    for local in ("http://localhost:1/mcp", "http://127.0.0.1:1/", "http://[::1]:9/mcp"):
        assert not McpServer.from_dict({**HTTP, "url": local}).remote


@pytest.mark.parametrize("change, field", [
    ({"max_tool_calls": 0}, "max_tool_calls"), ({"tool_timeout_s": 0}, "tool_timeout_s"),
    ({"tool_choice": "always"}, "tool_choice"), ({"tool_allow": {"add": "x"}}, "tool_allow"),
    ({"mcp_servers": [STDIO, STDIO]}, "mcp_servers"),
])
def test_bad_tool_settings_name_their_field(change, field):
    with pytest.raises(SettingsError, match=f"^{field}:"):
        Settings(**change).validate()


def test_a_malformed_server_is_left_out_on_its_own_and_the_file_kept(tmp_path):
    path = tmp_path / "settings.json"
    bad = {**STDIO, "name": "broken", "command": 7}
    path.write_text(json.dumps({"mcp_servers": [STDIO, bad, HTTP], "theme": "dark", "max_tool_calls": 4}))
    s, msg = SettingsFile(path).load()
    assert [d["name"] for d in s.mcp_servers] == ["calc", "web"]
    assert s.theme == "dark" and s.max_tool_calls == 4
    assert "mcp_servers[1].command" in msg and "left out" in msg
    backups = [p for p in tmp_path.iterdir() if p.name != "settings.json"]
    assert backups and "broken" in backups[0].read_text()   # nothing is lost: the original is kept


def test_allow_always_holds_only_for_the_same_tool_list():
    class T:
        def __init__(self, name, description="", schema=None):
            self.name, self.description, self.schema = name, description, schema or {}
    before = mcp_servers.fingerprint([T("add"), T("read")])
    allow = {mcp_servers.allow_key("calc", "add"): before}
    assert mcp_servers.always_allowed(allow, "calc", "add", before)
    assert not mcp_servers.always_allowed(allow, "calc", "read", before)
    assert not mcp_servers.always_allowed(allow, "other", "add", before)
    changed = mcp_servers.fingerprint([T("add"), T("read", "now deletes files")])
    assert not mcp_servers.always_allowed(allow, "calc", "add", changed)
    assert mcp_servers.fingerprint([T("read"), T("add")]) == before   # the order does not matter

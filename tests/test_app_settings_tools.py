"""Settings → Tools, the real page in the real dialog (offscreen): adding, switching off and
removing MCP servers, the confirmation a URL on another machine needs, Revoke, and the
values handed back to Settings (an OK that keeps everything the user did not touch)."""
from __future__ import annotations

import sys

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTabWidget

from app.core import mcp_servers as mcp
from app.core.settings import Settings
from app.settings_ui.settings_tools_tab import ToolsTab

CALC = {"name": "calc", "kind": "stdio", "command": sys.executable, "args": ["tests/mcp_server.py", "stdio", "."]}


def tab(qtbot, **kw) -> ToolsTab:
    t = ToolsTab(Settings(**kw))
    qtbot.addWidget(t)
    return t


def add(t: ToolsTab, name: str, kind: int, where: str) -> bool:
    t.name.setText(name)
    t.kind.setCurrentIndex(kind)
    t.where.setText(where)
    return t.add_server()


def test_no_server_by_default_and_the_defaults_round_trip(qtbot):
    t = tab(qtbot)
    assert t.servers.count() == 0 and t.allowed.count() == 0
    assert t.values() == {"mcp_servers": [], "tool_allow": {}, "max_tool_calls": mcp.MAX_TOOL_CALLS,
                          "tool_timeout_s": mcp.TOOL_TIMEOUT_S, "tool_choice": "auto"}


def test_a_program_and_a_local_url_are_added_as_the_user_wrote_them(qtbot):
    t = tab(qtbot)
    assert add(t, "files", 0, "uvx 'mcp server' --root /tmp/my files")
    assert add(t, "web", 1, "http://127.0.0.1:8931/mcp")
    assert t.name.text() == "" and t.where.text() == "" and t.problem.isHidden()
    got = Settings(**t.values())
    got.validate()
    assert got.mcp_servers == [
        {"name": "files", "kind": "stdio", "enabled": True, "command": "uvx",
         "args": ["mcp server", "--root", "/tmp/my", "files"]},
        {"name": "web", "kind": "http", "enabled": True, "url": "http://127.0.0.1:8931/mcp"}]


def test_bad_entries_say_why_and_add_nothing(qtbot):
    t = tab(qtbot, mcp_servers=[CALC])
    for name, kind, where, said in (("calc", 0, "x", "already a server called"),
                                    ("other", 0, "", "program to run is missing"),
                                    ("other", 0, "say 'unclosed", "cannot be read"),
                                    ("a/b", 0, "x", "letters, digits"),
                                    ("other", 1, "ftp://127.0.0.1/", "http:// or https://")):
        assert not add(t, name, kind, where)
        assert t.problem.isVisibleTo(t) and said in t.problem.text(), (where, t.problem.text())
        assert t.servers.count() == 1
    assert t.where.text() == "ftp://127.0.0.1/"  # what the user typed stays, to be corrected


def test_another_machine_is_added_only_when_the_user_confirms(qtbot):
    t = tab(qtbot)
    asked: list[str] = []
    answer = [False]
    t.confirm_remote = lambda host: asked.append(host) or answer[0]  # the dialog's Yes/No
    assert not add(t, "far", 1, "https://tools.example.com/mcp")
    assert asked == ["tools.example.com"] and t.servers.count() == 0
    answer[0] = True
    assert add(t, "far", 1, "https://tools.example.com/mcp")
    assert asked == ["tools.example.com"] * 2
    (d,) = t.values()["mcp_servers"]
    assert d["remote_ok"] is True
    Settings(**t.values()).validate()
    assert add(t, "near", 1, "http://localhost:9/mcp") and len(asked) == 2  # this machine: not asked


def test_unticking_switches_a_server_off_and_remove_drops_it_with_its_allowances(qtbot):
    t = tab(qtbot, mcp_servers=[CALC, {**CALC, "name": "other"}],
            tool_allow={"calc/add": "f1", "other/add": "f2"})
    assert t.allowed.count() == 2 and t.allowed.item(0).text() == "calc → add"
    t.servers.item(1).setCheckState(Qt.CheckState.Unchecked)
    v = t.values()
    assert [d["enabled"] for d in v["mcp_servers"]] == [True, False]
    assert v["tool_allow"] == {"calc/add": "f1", "other/add": "f2"}  # off is not removed
    t.servers.setCurrentRow(0)
    t.remove.click()
    v = t.values()
    assert [d["name"] for d in v["mcp_servers"]] == ["other"] and v["tool_allow"] == {"other/add": "f2"}


def test_revoke_forgets_allow_always(qtbot):
    t = tab(qtbot, mcp_servers=[CALC], tool_allow={"calc/add": "f1", "calc/read_file": "f1"})
    t.allowed.setCurrentRow(0)
    t.revoke.click()
    assert t.values()["tool_allow"] == {"calc/read_file": "f1"}


def test_the_limits_and_the_choice_are_kept(qtbot):
    t = tab(qtbot, max_tool_calls=3, tool_timeout_s=5.0, tool_choice="required")
    assert (t.max_calls.value(), t.timeout.value(), t.choice.currentIndex()) == (3, 5.0, 1)
    t.max_calls.setValue(7)
    t.choice.setCurrentIndex(0)
    v = t.values()
    assert (v["max_tool_calls"], v["tool_timeout_s"], v["tool_choice"]) == (7, 5.0, "auto")


def test_ok_in_the_dialog_keeps_the_servers_and_the_page_is_there(qtbot, data_dir):
    from app.settings_ui.settings_dialog import SettingsDialog

    s = Settings(mcp_servers=[CALC], tool_allow={"calc/add": "f1"}, max_tool_calls=4)
    dlg = SettingsDialog(s, None)
    qtbot.addWidget(dlg)
    tabs = dlg.findChild(QTabWidget)
    assert "Tools" in [tabs.tabText(i) for i in range(tabs.count())]
    page = tabs.widget([tabs.tabText(i) for i in range(tabs.count())].index("Tools"))
    assert page.widget() is dlg.tools_tab  # in its scroll area (the dialog fits a laptop screen)
    built = dlg.build()
    assert built.mcp_servers == [{**CALC, "enabled": True}] and built.tool_allow == {"calc/add": "f1"}
    assert built.max_tool_calls == 4
    dlg.tools_tab.servers.item(0).setCheckState(Qt.CheckState.Unchecked)
    assert dlg.build().mcp_servers[0]["enabled"] is False

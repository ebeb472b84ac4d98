"""Export as Markdown or JSON, import JSON: every branch round-trips exactly."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.export import ImportFailed, import_json, to_json, to_markdown
from app.core.store import Store
from engine.prompt.messages import ImagePart, TextPart, ToolCall


def branched(store: Store) -> int:
    """A conversation with a regenerated reply, a follow-up, metrics and a cut-short reply."""
    c = store.create_conversation(system_prompt="Be brief.")
    _, a1 = store.start_turn(c.id, "Name a bread 🍞")
    store.finish_reply(a1, "Sourdough.", complete=True, finish_reason="eos", metrics={"ttft_ms": 12.5})
    _, a2 = store.start_turn(c.id, None, replace_from=a1)
    store.finish_reply(a2, "Rye, with `code` and <b>html</b>.", complete=True, finish_reason="eos")
    _, a3 = store.start_turn(c.id, "Another?")
    store.finish_reply(a3, "Focacc", complete=False, finish_reason="cancelled")
    store.set_pinned(c.id, True)
    store.show_branch(c.id, a1)
    return c.id


def test_json_export_import_export_is_identical_and_keeps_every_branch(tmp_path):
    s = Store(tmp_path / "a.sqlite3")
    cid = branched(s)
    first = to_json(s, cid)
    data = json.loads(first)
    assert data["format"] == "hearth-conversation" and len(data["messages"]) == 5
    assert data["messages"][data["current"]]["content"] == "Sourdough."
    s.close()

    other = Store(tmp_path / "b.sqlite3")  # a fresh store, as on another machine
    new = import_json(other, first)
    assert to_json(other, new) == first
    assert [m.content for m in other.messages(new)] == ["Name a bread 🍞", "Sourdough."]
    (conv,) = other.list_conversations()
    assert conv.pinned and conv.system_prompt == "Be brief."
    other.close()
    again = Store(tmp_path / "b.sqlite3")  # survives a restart
    assert to_json(again, new) == first
    two = [m.id for m in again.messages(new)]
    assert again.branch_positions(new, two) == {two[1]: (1, 2)}
    again.close()


def test_markdown_export_is_the_branch_on_screen(tmp_path):
    s = Store(tmp_path / "a.sqlite3")
    cid = branched(s)
    s.show_branch(cid, s.siblings(s.messages(cid)[1].id)[1])
    md = to_markdown(s, cid)
    assert md == ("# Name a bread 🍞\n\n## System\n\nBe brief.\n\n## You\n\nName a bread 🍞\n\n"
                  "## Hearth\n\nRye, with `code` and <b>html</b>.\n\n## You\n\nAnother?\n\n"
                  "## Hearth\n\nFocacc\n\n*(incomplete)*\n")
    s.close()


@pytest.mark.parametrize("text, says", [
    ("not json", "not a JSON file"),
    ('{"format": "other"}', "not a Hearth conversation"),
    ('{"format": "hearth-conversation", "version": 9}', "another Hearth version"),
    ('{"format": "hearth-conversation", "version": 1, "title": "t", "system_prompt": "", "created": 1,'
     ' "updated": 1, "current": 0, "messages": [{"parent": 0, "role": "user", "content": "x",'
     ' "complete": true, "created": 1}]}', "must be an earlier message"),
    ('{"format": "hearth-conversation", "version": 1, "title": "t", "system_prompt": "", "created": 1,'
     ' "updated": 1, "current": 0, "messages": [{"parent": null, "role": "robot", "content": "x",'
     ' "complete": true, "created": 1}]}', "unknown role"),
    ('{"format": "hearth-conversation", "version": 1, "title": "t", "system_prompt": "", "created": 1,'
     ' "updated": 1, "current": 3, "messages": []}', "points at no message"),
    ('{"format": "hearth-conversation", "version": 1, "title": "t", "system_prompt": 5, "created": 1,'
     ' "updated": 1, "messages": []}', "wrong type"),
])
def test_a_bad_file_is_refused_with_a_reason_and_nothing_is_written(tmp_path, text, says):
    s = Store(tmp_path / "a.sqlite3")
    with pytest.raises(ImportFailed, match=says):
        import_json(s, text)
    assert s.list_conversations() == []
    s.close()


def test_the_window_exports_imports_and_pins(qtbot, tmp_path, monkeypatch):
    from app.window.main_window import MainWindow

    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path / "data"))
    w = MainWindow()
    w.show()
    cid = branched(w.store)
    w.select_conversation(cid)
    out = w.export_conversation(tmp_path / "chat.json", "json")
    assert out is not None and "Exported" in " ".join(w.info.messages())
    md = w.export_conversation(tmp_path / "chat.md", "markdown")
    assert md.read_text(encoding="utf-8") == to_markdown(w.store, cid)
    assert w.export_conversation(tmp_path / "missing" / "x.json", "json") is None
    assert "Not exported" in " ".join(w.info.messages())

    (tmp_path / "bad.json").write_text('{"format": "hearth-conversation", "version": 1}', encoding="utf-8")
    before = w.conversations.ids()
    assert w.import_conversation(tmp_path / "bad.json") is None
    assert "Not imported" in " ".join(w.info.messages()) and w.conversations.ids() == before

    new = w.import_conversation(out)
    assert w.current == new and to_json(w.store, new) == out.read_text(encoding="utf-8")
    assert [x.text for x in w.chat.message_widgets()] == ["Name a bread 🍞", "Sourdough."]
    assert w.chat.widget(w.chat.message_widgets()[1].mid).branch_label.text() == "1/2"

    # Pins: both exported chats were pinned; unpin the import and it drops below.
    assert w.conversations.ids()[:2] == [new, cid]
    w.conversations.list.setCurrentRow(0)
    assert w.conversations.pin_button.text() == "Unpin"
    w.conversations.pin_button.click()
    assert w.conversations.ids()[0] == cid and not w.store.conversation(new).pinned
    assert w.conversations.list.item(0).font().bold()
    w.close()
    again = MainWindow()  # the pin survives a restart
    assert again.conversations.ids()[0] == cid
    again.close()


# -- version 2: reasoning, tool calls and parts; version 1 files still import ----------------------

FIXTURES = Path(__file__).parent / "fixtures" / "messages"


def thinking(store: Store) -> int:
    c = store.create_conversation(title="Wetter ☀")
    img = ImagePart("d" * 64, "image/png")
    store.add_message(c.id, "user", parts=(TextPart("Wie ist das Wetter hier? "), img))
    call = ToolCall("call_1", "get_weather", '{"city": "Zürich"}')
    store.add_message(c.id, "assistant", "", reasoning="Ein Werkzeug hilft.", tool_calls=(call,))
    store.add_message(c.id, "tool", '{"temp_c": 21}', tool_call_id="call_1")
    _, mid = store.start_turn(c.id, None)
    store.finish_reply(mid, "21 °C.", complete=True, finish_reason="eos", reasoning="Das Werkzeug sagt 21.\n\n"
                       "Kurz antworten.", reasoning_tokens=9)
    _, cut = store.start_turn(c.id, None, replace_from=mid)
    store.finish_reply(cut, "", complete=False, finish_reason="max_tokens", reasoning="Hmm, noch", reasoning_open=True)
    store.show_branch(c.id, mid)
    return c.id


def test_version_2_keeps_reasoning_tool_calls_and_parts_apart_and_round_trips(tmp_path):
    s = Store(tmp_path / "a.sqlite3")
    cid = thinking(s)
    first = to_json(s, cid)
    data = json.loads(first)
    assert data["version"] == 2
    user, call, tool, answer, cut = data["messages"]
    assert user["parts"] == [{"type": "text", "text": "Wie ist das Wetter hier? "},
                             {"type": "image", "sha256": "d" * 64, "mime": "image/png"}]
    assert user["content"] == "Wie ist das Wetter hier? " and answer["parts"] == []
    assert call["tool_calls"] == [{"id": "call_1", "name": "get_weather", "arguments": '{"city": "Zürich"}'}]
    assert (call["content"], call["reasoning"]) == ("", "Ein Werkzeug hilft.")
    assert (tool["role"], tool["tool_call_id"]) == ("tool", "call_1")
    assert (answer["content"], answer["reasoning_tokens"], answer["reasoning_open"]) == ("21 °C.", 9, False)
    assert (cut["reasoning"], cut["reasoning_open"]) == ("Hmm, noch", True)
    other = Store(tmp_path / "b.sqlite3")
    new = import_json(other, first)
    assert to_json(other, new) == first
    assert [m.as_message() for m in other.messages(new)] == [m.as_message() for m in s.messages(cid)]
    s.close()
    other.close()


def test_markdown_shows_reasoning_and_tool_calls_apart(tmp_path):
    s = Store(tmp_path / "a.sqlite3")
    cid = thinking(s)
    md = to_markdown(s, cid)
    assert md == ("# Wetter ☀\n\n## You\n\nWie ist das Wetter hier? \n\n"
                  "## Hearth\n\n> **Reasoning**\n>\n> Ein Werkzeug hilft.\n\n"
                  "**Tool call** `get_weather`\n\n```json\n{\"city\": \"Zürich\"}\n```\n\n"
                  "## Tool\n\n{\"temp_c\": 21}\n\n"
                  "## Hearth\n\n> **Reasoning**\n>\n> Das Werkzeug sagt 21.\n>\n> Kurz antworten.\n\n21 °C.\n")
    s.show_branch(cid, s.siblings(s.messages(cid)[-1].id)[1])
    assert to_markdown(s, cid).endswith("## Hearth\n\n> **Reasoning** (unfinished)\n>\n> Hmm, noch\n\n"
                                        "*(incomplete)*\n")
    s.close()


def test_a_version_1_file_from_the_released_exporter_still_imports(tmp_path):
    """tests/fixtures/messages/export_v1.json was written by the version 1 exporter."""
    text = (FIXTURES / "export_v1.json").read_text(encoding="utf-8")
    assert json.loads(text)["version"] == 1
    s = Store(tmp_path / "a.sqlite3")
    cid = import_json(s, text)
    conv = s.conversation(cid)
    assert (conv.title, conv.system_prompt) == ("Grüße, 日本語 and <think>", "Be terse. ✓")
    shown = s.messages(cid)
    assert [(m.role, m.content, m.reasoning) for m in shown] == [
        ("user", "Wie geht's? 👋", None), ("assistant", "Gut, danke!", "The user greets in German."),
        ("user", "Und 日本語?", None), ("assistant", "Genki", None)]
    assert shown[-1].finish_reason == "max_tokens" and not shown[-1].complete
    everything = s.all_messages(cid)
    assert [m.content for m, _p in everything] == ["Wie geht's? 👋", "Gut, danke!", "Und 日本語?", "元気です。",
                                                   "Genki"]
    assert [p for _m, p in everything][3:] == [shown[2].id, shown[2].id]  # the two branches of the last reply
    assert everything[3][0].metrics == {"tokens": 3, "timed": False}
    again = json.loads(to_json(s, cid))  # it exports as version 2
    assert again["version"] == 2 and again["messages"][1]["reasoning"] == "The user greets in German."
    s.close()


@pytest.mark.parametrize("change, says", [
    ({"reasoning": 5}, "“reasoning” has the wrong type"),
    ({"role": "user", "reasoning": "x"}, "only an assistant message has reasoning"),
    ({"tool_calls": [{"id": "c", "name": "f", "arguments": {"a": 1}}]}, "arguments as JSON text"),
    ({"tool_calls": [{"id": "c", "name": "", "arguments": "{}"}]}, "needs the name"),
    ({"tool_call_id": "c"}, "only a tool message answers"),
    ({"parts": [{"type": "image", "sha256": "nope", "mime": "image/png"}]}, "SHA-256"),
    ({"parts": [{"type": "text", "text": "other"}]}, "not the text of its parts"),
    ({"parts": [{"type": "audio"}]}, "unknown content part"),
    ({"reasoning_tokens": -1}, "cannot be negative"),
])
def test_a_bad_version_2_message_is_refused_with_a_reason(tmp_path, change, says):
    s = Store(tmp_path / "a.sqlite3")
    cid = thinking(s)
    data = json.loads(to_json(s, cid))
    data["messages"][3].update(change)
    with pytest.raises(ImportFailed, match=says):
        import_json(s, json.dumps(data))
    assert [c.id for c in s.list_conversations()] == [cid]
    s.close()


@pytest.mark.parametrize("choice", [False, True, "high", None])
def test_the_think_choice_travels_with_the_conversation(tmp_path, choice):
    s = Store(tmp_path / "a.sqlite3")
    cid = branched(s)
    s.set_think(cid, choice)
    text = to_json(s, cid)
    assert json.loads(text)["think"] == choice
    other = Store(tmp_path / "b.sqlite3")
    new = import_json(other, text)
    assert other.conversation(new).think == choice and to_json(other, new) == text


def test_a_think_choice_of_the_wrong_type_is_refused(tmp_path):
    s = Store(tmp_path / "a.sqlite3")
    data = json.loads(to_json(s, branched(s)))
    data["think"] = 3
    with pytest.raises(ImportFailed, match="“think” has the wrong type"):
        import_json(s, json.dumps(data))

"""The store's schema 3: reasoning, tool calls and parts, and the migration from a real
version 2 database (built with the released MIGRATIONS[:2] SQL) that loses nothing."""
from __future__ import annotations

import json
import sqlite3

import pytest

from app.core.store import SCHEMA_VERSION, Store
from app.core.store_schema import MIGRATIONS, split_think, statements
from engine.prompt.messages import DocumentPart, ImagePart, Message, TextPart, ToolCall

SHA = "b" * 64


@pytest.mark.parametrize("text, split", [
    ("<think>\nplan 🤔\n</think>\n\nAnswer.", ("plan 🤔", "Answer.")),
    ("  \n<think>a</think>b", ("a", "b")),
    ("<think></think>\n\nJust the answer", ("", "Just the answer")),
    ("<think>only thought</think>", ("only thought", "")),
    ("<seed:think>種子</seed:think>答え", ("種子", "答え")),
    ("<think>a</think>b</think>c", ("a", "b</think>c")),       # the first close ends it
    ("<think>never closed", None),                              # cut short: left as it is
    ("Answer first <think>x</think>", None),                    # not at the start
    ("<seed:think>x</think>", None),                            # another family's close
    ("plain", None),
])
def test_split_think(text, split):
    assert split_think(text) == split


def v2_database(path) -> None:
    """A database as the released Hearth (schema 2) left it: branches, hidden rows, replies
    with reasoning blocks written as text, non-ASCII, metrics."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (2)")
    for step in MIGRATIONS[:2]:
        assert isinstance(step, str)
        for stmt in statements(step):
            conn.execute(stmt)
    conn.execute("INSERT INTO conversations (id, title, system_prompt, draft, created, updated, leaf_id, pinned) "
                 "VALUES (7, 'Brot 🍞', 'Sé breve.', 'halb getippt', 1.5, 2.5, 15, 1)")
    conn.execute("INSERT INTO conversations (id, title, created, updated, leaf_id, deleted) "
                 "VALUES (8, 'gone', 1, 1, 20, 1)")
    rows = [  # id, conv, role, content, complete, finish_reason, error, metrics, deleted, parent
        (10, 7, "user", "Wie backe ich Brot?", 1, None, None, None, 0, None),
        (11, 7, "assistant", "<think>\nThe user wants bread. Kneten!\n</think>\n\nKneten und backen.",
         1, "eos", None, '{"ttft_ms": 12.5, "tokens": 9}', 0, 10),
        (12, 7, "assistant", "Sourdough, </think> mentioned later.", 1, "eos", None, None, 0, 10),  # a sibling
        (13, 7, "user", "<think>users are never split</think> und 日本語?", 1, None, None, None, 0, 11),
        (14, 7, "assistant", "<think>still thinking about 日本", 0, "max_tokens", None, None, 0, 13),
        (15, 7, "assistant", "<seed:think>パン</seed:think>パンを焼く。", 1, "eos", None, None, 0, 13),
        (16, 7, "assistant", "<think>old hidden</think>hidden", 1, "eos", None, None, 1, None),
        (20, 8, "user", "deleted conversation", 1, None, None, None, 0, None),
        (21, 7, "assistant", "crashed mid-rep", 0, None, "boom", None, 0, 13),
    ]
    for r in rows:
        conn.execute("INSERT INTO messages (id, conversation_id, role, content, complete, finish_reason, error, "
                     "metrics, created, deleted, parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (*r[:8], 100.0 + r[0], *r[8:]))
    conn.close()


def table(path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_migrating_a_real_v2_database_keeps_every_row_and_splits_known_reasoning(tmp_path):
    path = tmp_path / "hearth.sqlite3"
    v2_database(path)
    cols = "id, conversation_id, role, content, complete, finish_reason, error, metrics, created, deleted, parent_id"
    before = table(path, f"SELECT {cols} FROM messages ORDER BY id")
    convs_before = table(path, "SELECT * FROM conversations ORDER BY id")
    s = Store(path)
    assert s.schema_version() == SCHEMA_VERSION == 5
    after = table(path, f"SELECT {cols}, reasoning, reasoning_open, reasoning_tokens, tool_calls, tool_call_id "
                        "FROM messages ORDER BY id")
    # every conversation kept as it was; the Think choice (new in v3) is the model's default, and a chat's
    # own settings (new in v4) and context policy (new in v5) are none; no message is pinned, none summarized
    assert table(path, "SELECT * FROM conversations ORDER BY id") == [(*c, None, None, None) for c in convs_before]
    assert table(path, "SELECT DISTINCT pinned FROM messages") == [(0,)] and s.summaries(7) == []
    split = {11: ("The user wants bread. Kneten!", "Kneten und backen."), 15: ("パン", "パンを焼く。"),
             16: ("old hidden", "hidden")}
    assert len(after) == len(before)
    for old, new in zip(before, after):
        mid = old[0]
        content, reasoning = (split[mid][1], split[mid][0]) if mid in split else (old[3], None)
        assert new == (*old[:3], content, *old[4:], reasoning, 0, None, None, None), mid
    # The conversation reads as before, the reasoning now apart.
    path_ids = [m.id for m in s.messages(7)]
    assert path_ids == [10, 11, 13, 15]
    reply = s.message(11)
    assert (reply.content, reply.reasoning, reply.metrics) == ("Kneten und backen.", "The user wants bread. Kneten!",
                                                               {"ttft_ms": 12.5, "tokens": 9})
    assert s.message(14).reasoning is None and s.message(14).content == "<think>still thinking about 日本"
    assert s.message(21).interrupted and s.message(21).error == "boom"
    assert s.siblings(11) == [11, 12] and s.branch_positions(7, path_ids)[11] == (1, 2)
    assert s.conversation(7).draft == "halb getippt" and s.conversation(7).pinned
    # The index was rebuilt: answers, and with reasoning=True the reasoning too.
    assert [h.message_id for h in s.search_messages("backen")] == [11]
    assert s.search_messages("wants bread") == []
    (hit,) = s.search_messages("wants bread", reasoning=True)
    assert hit.message_id == 11 and hit.in_reasoning and "\x02wants\x03" in hit.snippet
    (hit,) = s.search_messages("Kneten", reasoning=True)  # in both: the answer's snippet
    assert hit.message_id == 11 and not hit.in_reasoning and hit.snippet == "\x02Kneten\x03 und backen."
    assert sorted(h.message_id for h in s.search_messages("日本")) == [13, 14]
    assert s.search_messages("hidden", reasoning=True) == [] and s.search_messages("deleted") == []
    # The rebuilt table's triggers keep the index in step.
    _, mid = s.start_turn(7, "Noch eine Frage")
    s.update_reply(mid, "Teig ruhen", reasoning="Gluten braucht Zeit")
    assert [h.message_id for h in s.search_messages("Gluten", reasoning=True)] == [mid]
    s.finish_reply(mid, "Teig ruhen lassen.", complete=True, finish_reason="eos", reasoning="Hefe!")
    assert s.search_messages("Gluten", reasoning=True) == []
    assert [h.message_id for h in s.search_messages("Hefe", reasoning=True)] == [mid]
    assert s.purge_deleted() == 1
    assert table(path, "SELECT count(*) FROM messages WHERE conversation_id = 8") == [(0,)]
    s.close()
    again = Store(path)  # reopening migrates nothing twice
    assert again.message(11).reasoning == "The user wants bread. Kneten!" and again.schema_version() == SCHEMA_VERSION
    assert table(path, "PRAGMA integrity_check") == [("ok",)]
    assert table(path, "PRAGMA foreign_key_check") == []
    again.close()


def test_the_new_schema_admits_tool_messages_and_still_refuses_unknown_roles(tmp_path):
    path = tmp_path / "h.sqlite3"
    s = Store(path)
    c = s.create_conversation()
    s.add_message(c.id, "user", "Wetter?")
    call = ToolCall("call_1", "get_weather", '{"city": "Zürich"}')
    a = s.add_message(c.id, "assistant", "", reasoning="need a tool", tool_calls=(call,))
    t = s.add_message(c.id, "tool", '{"temp_c": 21}', tool_call_id="call_1")
    got = s.messages(c.id)
    assert got[1].tool_calls == (call,) and got[1].reasoning == "need a tool" and got[1].id == a
    assert got[2].role == "tool" and got[2].tool_call_id == "call_1" and got[2].id == t
    assert [m.as_message() for m in got] == [
        Message("user", "Wetter?"), Message("assistant", "", reasoning="need a tool", tool_calls=(call,)),
        Message("tool", '{"temp_c": 21}', tool_call_id="call_1")]
    with pytest.raises(ValueError, match="unknown role"):
        s.add_message(c.id, "robot", "x")
    s.close()
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("INSERT INTO messages (conversation_id, role, content, created) VALUES (1, 'robot', 'x', 1)")
    conn.close()


def test_parts_are_kept_in_order_and_go_with_their_message(tmp_path):
    path = tmp_path / "h.sqlite3"
    s = Store(path)
    c = s.create_conversation()
    img = ImagePart(SHA, "image/webp")
    doc = DocumentPart("c" * 64, "Vertrag (2024).pdf", pages=31, mime="application/pdf")
    mid = s.add_message(c.id, "user", parts=(TextPart("Compare "), img, TextPart(" with "), doc))
    plain = s.add_message(c.id, "assistant", "Done.")
    m = s.message(mid)
    assert m.content == "Compare  with " and m.parts == (TextPart("Compare "), img, TextPart(" with "), doc)
    assert m.as_message() == Message.of("user", "Compare ", img, " with ", doc)
    assert s.message(plain).parts == () and s.message(plain).as_message() == Message("assistant", "Done.")
    assert s.conversation(c.id).title == "Compare  with"  # titles come from the text
    assert table(path, "SELECT message_id, idx, kind, sha256, name, meta FROM message_parts "
                       "WHERE kind != 'text' ORDER BY idx") == [
        (mid, 1, "image", SHA, None, None), (mid, 3, "document", "c" * 64, "Vertrag (2024).pdf", '{"pages": 31}')]
    # Who uses an attachment: one indexed look-up by hash.
    assert table(path, f"SELECT message_id FROM message_parts WHERE sha256 = '{SHA}'") == [(mid,)]
    assert [x.parts for x, _p in s.all_messages(c.id)] == [m.parts, ()]
    s.delete_conversation(c.id)
    s.purge_deleted()
    assert table(path, "SELECT count(*) FROM message_parts") == [(0,)]
    s.close()


def test_a_streamed_reply_keeps_its_reasoning_partial_and_final(tmp_path):
    s = Store(tmp_path / "h.sqlite3")
    c = s.create_conversation()
    _, mid = s.start_turn(c.id, "Why is the sky blue?")
    s.update_reply(mid, "", reasoning="Rayleigh scat")
    partial = s.message(mid)
    assert (partial.content, partial.reasoning, partial.complete) == ("", "Rayleigh scat", False)
    s.finish_reply(mid, "", complete=False, finish_reason="max_tokens", reasoning="Rayleigh scattering…",
                   reasoning_open=True, reasoning_tokens=7, metrics={"tokens": 7})
    cut = s.message(mid)
    assert (cut.reasoning, cut.reasoning_open, cut.reasoning_tokens, cut.finish_reason) == (
        "Rayleigh scattering…", True, 7, "max_tokens")
    _, again = s.start_turn(c.id, None, replace_from=mid)
    call = ToolCall("c9", "lookup", '{"q": "Rayleigh"}')
    s.finish_reply(again, "Short light scatters more.", complete=True, finish_reason="eos",
                   reasoning="Scattering goes as 1/λ⁴.", reasoning_tokens=12, tool_calls=(call,))
    done = s.message(again)
    assert (done.reasoning, done.reasoning_open, done.tool_calls) == ("Scattering goes as 1/λ⁴.", False, (call,))
    assert json.loads(table(tmp_path / "h.sqlite3", f"SELECT tool_calls FROM messages WHERE id = {again}")[0][0]) \
        == [{"id": "c9", "name": "lookup", "arguments": '{"q": "Rayleigh"}'}]
    s.close()


def test_the_window_gives_the_template_each_turns_reasoning_and_tool_calls(qtbot, tmp_path, monkeypatch):
    from app.window.main_window import MainWindow

    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path / "data"))
    w = MainWindow()
    s = w.store
    cid = s.create_conversation().id
    call = ToolCall("call_1", "get_weather", '{"city": "Bern"}')
    s.add_message(cid, "user", "Wetter?")
    s.add_message(cid, "assistant", "", reasoning="Werkzeug!", tool_calls=(call,))
    s.add_message(cid, "tool", "21 °C", tool_call_id="call_1")
    _, mid = s.start_turn(cid, None)
    s.finish_reply(mid, "21 °C.", complete=True, finish_reason="eos", reasoning="Kurz.")
    s.start_turn(cid, "Und morgen?")  # its reply has no text yet: left out, as before
    assert w.replies.history(cid, "Sé breve.") == [
        Message("system", "Sé breve."), Message("user", "Wetter?"),
        Message("assistant", "", reasoning="Werkzeug!", tool_calls=(call,)),
        Message("tool", "21 °C", tool_call_id="call_1"), Message("assistant", "21 °C.", reasoning="Kurz."),
        Message("user", "Und morgen?")]
    w.close()

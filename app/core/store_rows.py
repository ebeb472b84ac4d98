"""A stored message and its rows: the message columns, its parts, its tool calls. Qt-free.

``messages.content`` is a message's text (its text parts joined); a message with
an image or a document also has every part, in order, in ``message_parts``.
Tool calls are a JSON list in ``messages.tool_calls``, each call's arguments
kept as the exact JSON text the model wrote. These functions run inside the
store's connection.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Sequence

from engine.prompt import DocumentPart, ImagePart, Message, Part, TextPart, ToolCall


@dataclass(slots=True, frozen=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: str
    content: str                      # the answer's text
    complete: bool
    finish_reason: str | None
    error: str | None
    metrics: dict | None
    created: float
    reasoning: str | None = None      # what the model thought before answering
    reasoning_open: bool = False      # the reply stopped inside its reasoning block
    reasoning_tokens: int | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    parts: tuple[Part, ...] = ()      # every part in order; () for a text-only message
    pinned: bool = False              # never left out or summarized when the chat outgrows the context

    @property
    def interrupted(self) -> bool:
        """The app stopped (crash, kill) while this reply was being written."""
        return not self.complete and self.finish_reason is None

    def as_message(self) -> Message:
        """The engine's message for this row: what the chat template is given."""
        return Message(self.role, self.content, self.parts, self.reasoning, self.tool_calls,
                       self.tool_call_id, pinned=self.pinned)


def tool_calls_json(calls: Sequence[ToolCall]) -> str | None:
    if not calls:
        return None
    return json.dumps([{"id": t.id, "name": t.name, "arguments": t.arguments} for t in calls],
                      ensure_ascii=False)


def tool_calls_from(text: str | None) -> tuple[ToolCall, ...]:
    if not text:
        return ()
    return tuple(ToolCall(d["id"], d["name"], d["arguments"]) for d in json.loads(text))


def text_of(parts: Sequence[Part]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextPart))


def write_parts(c: sqlite3.Connection, mid: int, parts: Sequence[Part]) -> None:
    """Keep ``parts`` as the message's rows, if any part is not text (text-only: no rows)."""
    c.execute("DELETE FROM message_parts WHERE message_id = ?", (mid,))
    if all(isinstance(p, TextPart) for p in parts):
        return
    for i, p in enumerate(parts):
        if isinstance(p, TextPart):
            row = ("text", p.text, None, None, None, None)
        elif isinstance(p, ImagePart):
            row = ("image", None, p.sha256, p.mime, None, None)
        else:
            row = ("document", None, p.sha256, p.mime, p.name, json.dumps({"pages": p.pages}))
        c.execute("INSERT INTO message_parts (message_id, idx, kind, text, sha256, mime, name, meta) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (mid, i, *row))


def _part(r: sqlite3.Row) -> Part:
    if r["kind"] == "text":
        return TextPart(r["text"])
    if r["kind"] == "image":
        return ImagePart(r["sha256"], r["mime"])
    meta = json.loads(r["meta"]) if r["meta"] else {}
    return DocumentPart(r["sha256"], r["name"], meta.get("pages"), r["mime"] or "")


def parts_of(c: sqlite3.Connection, ids: Sequence[int]) -> dict[int, tuple[Part, ...]]:
    """The stored parts of each of ``ids`` that has any (one query, however many ids)."""
    if not ids:
        return {}
    out: dict[int, list[Part]] = {}
    rows = c.execute("SELECT * FROM message_parts WHERE message_id IN (SELECT value FROM json_each(?)) "
                     "ORDER BY message_id, idx", (json.dumps(list(ids)),))
    for r in rows:
        out.setdefault(r["message_id"], []).append(_part(r))
    return {k: tuple(v) for k, v in out.items()}


def messages_from(c: sqlite3.Connection, rows: Sequence[sqlite3.Row]) -> list[StoredMessage]:
    parts = parts_of(c, [r["id"] for r in rows])
    return [_msg(r, parts.get(r["id"], ())) for r in rows]


def _msg(row: sqlite3.Row, parts: tuple[Part, ...]) -> StoredMessage:
    metrics = json.loads(row["metrics"]) if row["metrics"] else None
    return StoredMessage(row["id"], row["conversation_id"], row["role"], row["content"],
                         bool(row["complete"]), row["finish_reason"], row["error"], metrics,
                         row["created"], row["reasoning"], bool(row["reasoning_open"]),
                         row["reasoning_tokens"], tool_calls_from(row["tool_calls"]), row["tool_call_id"],
                         parts, bool(row["pinned"]))


DEFAULT_TITLE = "New chat"
TITLE_MAX = 60


def title_from(text: str) -> str:
    """A conversation title from the first line of the first user message."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not line:
        return DEFAULT_TITLE
    return line if len(line) <= TITLE_MAX else line[: TITLE_MAX - 1].rstrip() + "…"

"""Conversations, messages and per-message metrics in SQLite. Qt-free.

Why it looks like this:
- WAL mode: the generation thread commits partial replies while the window reads; a kill keeps them.
- ``synchronous=FULL``: a commit is on disk before it returns, so even a power
  cut keeps it. Partial replies are throttled by the caller, so this is cheap.
- Every change runs in one ``BEGIN IMMEDIATE`` transaction (``_tx``).
- Nothing the user wrote is hard-deleted by normal use: deleting a
  conversation, regenerating or editing only sets a ``deleted`` flag, so undo
  is a flag flip. ``purge_deleted`` drops flagged conversations at start-up.
- A file that is not a healthy database is renamed aside with a timestamp and
  a fresh one is created; ``Store.notice`` carries the message for the window.

One ``Store`` is one connection and must be used from the thread that made it
(sqlite3's rule); the generation runner opens its own with ``recover=False``.
"""
from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from app.core import branches, chat_search
from app.core.attachments import FOLDER as ATTACHMENTS_FOLDER, Attachments
from app.core.paths import data_dir, move_aside
from app.core.store_context import ContextRows, Summary
from app.core.store_rows import DEFAULT_TITLE, StoredMessage, messages_from, text_of, title_from, tool_calls_json, \
    write_parts
from app.core.store_schema import SCHEMA_VERSION, run_step
from engine.prompt import ImagePart, Part, TextPart, ToolCall

__all__ = ["SCHEMA_VERSION", "Conversation", "Store", "StoreError", "StoredMessage", "Summary", "title_from"]

DB_NAME = "hearth.sqlite3"
ROLES = ("system", "user", "assistant", "tool")


class StoreError(Exception):
    """The database cannot be used (e.g. written by a newer Hearth)."""


@dataclass(slots=True, frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str
    draft: str
    created: float
    updated: float
    pinned: bool = False
    think: object = None  # the Think control's choice here (True/False, "high", ...); None: the model's default
    settings: dict = field(default_factory=dict)  # this chat's own settings (model_settings.CHAT_KEYS)
    context_policy: str | None = None  # this chat's own (engine/prompt/view.py); None: Settings'


def default_path() -> Path:
    return data_dir() / DB_NAME


class Store(ContextRows):
    def __init__(self, path: Path | str | None = None, *, recover: bool = True) -> None:
        """Open (or create) the database.

        ``recover=True`` (the window's store): a damaged file is moved aside and
        replaced, with ``self.notice`` saying where it went. ``recover=False``
        (a worker's second connection): damage raises instead, because only one
        owner may rename files.
        """
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.attachments = Attachments(self.path.parent / ATTACHMENTS_FOLDER)  # images, documents by hash
        self.notice: str | None = None
        try:
            self._conn = self._open()
        except sqlite3.DatabaseError as e:
            if not recover:
                raise StoreError(f"the conversation database {self.path} is damaged: {e}") from e
            moved = self._move_aside()
            self.notice = (f"The conversation database was damaged ({e}), so Hearth started a new one. "
                           f"The old file was kept as {moved}.")
            self._conn = self._open()

    # -- opening ------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=10.0)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout = 10000")
            # Any non-database file fails on the first statement that reads the header.
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.DatabaseError(f"could not switch to WAL mode (got {mode})")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            version = row[0] if row else 0
            if row is None:
                conn.execute("INSERT INTO schema_version (version) VALUES (0)")
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path} was written by a newer Hearth (schema {version}, "
                                 f"this one knows {SCHEMA_VERSION}); update Hearth to open it")
            for step in range(version, SCHEMA_VERSION):
                run_step(conn, step)
                conn.execute("UPDATE schema_version SET version = ?", (step + 1,))
            conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise

    def _move_aside(self) -> Path:
        moved = move_aside(self.path)
        # The WAL and shared-memory files belong to the damaged file: keep them with it.
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                side.replace(moved.with_name(moved.name + suffix))
        return moved

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction; on any failure, including COMMIT's own (a busy database, a full
        disk, a deferred constraint), it is rolled back and the error re-raised, so the
        connection never stays stuck inside a transaction."""
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
            c.execute("COMMIT")
        except BaseException:
            self._rollback(c)
            raise

    @staticmethod
    def _rollback(c: sqlite3.Connection) -> None:
        # SQLite ends the transaction itself on some errors (SQLITE_FULL, for one); a
        # ROLLBACK then would fail and hide the error that matters.
        if c.in_transaction:
            c.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()

    def schema_version(self) -> int:
        return self._conn.execute("SELECT version FROM schema_version").fetchone()[0]

    def journal_mode(self) -> str:
        return self._conn.execute("PRAGMA journal_mode").fetchone()[0]

    # -- conversations ------------------------------------------------------

    @staticmethod
    def _conv(row: sqlite3.Row) -> Conversation:
        return Conversation(row["id"], row["title"], row["system_prompt"], row["draft"], row["created"],
                            row["updated"], bool(row["pinned"]),
                            json.loads(row["think"]) if row["think"] is not None else None,
                            json.loads(row["settings"]) if row["settings"] else {}, row["context_policy"])

    def create_conversation(self, title: str = DEFAULT_TITLE, system_prompt: str = "") -> Conversation:
        now = time.time()
        with self._tx() as c:
            cur = c.execute("INSERT INTO conversations (title, system_prompt, created, updated) "
                            "VALUES (?, ?, ?, ?)", (title, system_prompt, now, now))
            cid = cur.lastrowid
        return self.conversation(cid)

    def conversation(self, cid: int) -> Conversation:
        row = self._conn.execute("SELECT * FROM conversations WHERE id = ?", (cid,)).fetchone()
        if row is None:
            raise KeyError(cid)
        return self._conv(row)

    def list_conversations(self, search: str = "") -> list[Conversation]:
        """Live conversations, pinned first, then most recently active; ``search`` filters titles."""
        sql = "SELECT * FROM conversations WHERE deleted = 0"
        args: tuple = ()
        if search.strip():
            pattern = search.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            sql += " AND title LIKE ? ESCAPE '\\'"
            args = (f"%{pattern}%",)
        sql += " ORDER BY pinned DESC, updated DESC, id DESC"
        return [self._conv(r) for r in self._conn.execute(sql, args)]

    def rename_conversation(self, cid: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise ValueError("a conversation title cannot be empty")
        with self._tx() as c:
            c.execute("UPDATE conversations SET title = ?, auto_title = 0 WHERE id = ?", (title, cid))

    def _set(self, cid: int, column: str, value: object) -> None:
        with self._tx() as c:
            c.execute(f"UPDATE conversations SET {column} = ? WHERE id = ?", (value, cid))

    def set_system_prompt(self, cid: int, text: str) -> None:
        self._set(cid, "system_prompt", text)

    def set_draft(self, cid: int, text: str) -> None:
        self._set(cid, "draft", text)

    def set_think(self, cid: int, choice: object) -> None:
        """Remember the Think control's choice for ``cid`` (None: back to the model's default)."""
        self._set(cid, "think", json.dumps(choice) if choice is not None else None)

    def set_settings(self, cid: int, values: dict) -> None:
        """This chat's own settings, over its model's ({}: none; the caller checks them)."""
        self._set(cid, "settings", json.dumps(values) if values else None)

    def delete_conversation(self, cid: int) -> None:
        """Hide a conversation; ``restore_conversation`` undoes it."""
        self._set(cid, "deleted", 1)

    def restore_conversation(self, cid: int) -> None:
        self._set(cid, "deleted", 0)

    def purge_deleted(self) -> int:
        """Really remove conversations deleted in an earlier session, then the attachments
        nothing uses any more (see app/core/attachments.py). Returns how many conversations."""
        with self._tx() as c:
            c.execute("DELETE FROM messages WHERE conversation_id IN "
                      "(SELECT id FROM conversations WHERE deleted = 1)")
            n = c.execute("DELETE FROM conversations WHERE deleted = 1").rowcount
        self.attachments.collect(self._conn)
        return n

    # -- messages -----------------------------------------------------------

    def messages(self, cid: int) -> list[StoredMessage]:
        """The branch on screen, oldest first (see app/core/branches.py)."""
        return messages_from(self._conn, branches.path_rows(self._conn, cid))

    def message(self, mid: int) -> StoredMessage:
        row = self._conn.execute("SELECT * FROM messages WHERE id = ?", (mid,)).fetchone()
        if row is None:
            raise KeyError(mid)
        return messages_from(self._conn, [row])[0]

    def add_message(self, cid: int, role: str, content: str = "", *, complete: bool = True,
                    parts: Sequence[Part] = (), reasoning: str | None = None,
                    tool_calls: Sequence[ToolCall] = (), tool_call_id: str | None = None) -> int:
        """Append a message after the branch on screen; the first user message also names
        an untitled conversation. ``parts`` (text, images, documents in order) replace
        ``content``, whose text they then hold."""
        with self._tx() as c:
            mid = self._insert(c, cid, role, text_of(parts) if parts else content, complete, branches.leaf(c, cid))
            write_parts(c, mid, parts)
            if reasoning is not None or tool_calls or tool_call_id is not None:
                c.execute("UPDATE messages SET reasoning = ?, tool_calls = ?, tool_call_id = ? WHERE id = ?",
                          (reasoning, tool_calls_json(tool_calls), tool_call_id, mid))
            return mid

    @staticmethod
    def _insert(c: sqlite3.Connection, cid: int, role: str, content: str, complete: bool,
                parent: int | None) -> int:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        now = time.time()
        cur = c.execute("INSERT INTO messages (conversation_id, role, content, complete, "
                        "finish_reason, created, parent_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (cid, role, content, int(complete), None, now, parent))
        mid = cur.lastrowid
        c.execute("UPDATE conversations SET updated = ?, leaf_id = ? WHERE id = ?", (now, mid, cid))
        if role == "user":
            c.execute("UPDATE conversations SET title = ? WHERE id = ? AND auto_title = 1 "
                      "AND title = ?", (title_from(content), cid, DEFAULT_TITLE))
        return mid

    def start_turn(self, cid: int, user_text: str | None, *, replace_from: int | None = None,
                   attached: Sequence[Part] = ()) -> tuple[int | None, int]:
        """Everything a send does to the database, in one transaction (one disk sync).

        With ``replace_from`` (edit-and-resend, regenerate) the new messages become
        a sibling branch of that message; the old branch is kept. Adds the user's
        message (if any) and clears the draft it came from, then adds the empty,
        incomplete reply. Returns (user message id, reply id). ``attached``: its images and documents.
        """
        with self._tx() as c:
            parent = branches.leaf(c, cid) if replace_from is None else branches.parent_of(c, replace_from)
            user_mid = None
            if user_text is not None:
                user_mid = parent = self._insert(c, cid, "user", user_text, True, parent)
                if attached:  # images before the words (as shown; vision models are asked so), documents after
                    pics = [p for p in attached if isinstance(p, ImagePart)]
                    write_parts(c, user_mid, [*pics, TextPart(user_text), *[p for p in attached if p not in pics]])
                c.execute("UPDATE conversations SET draft = '' WHERE id = ?", (cid,))
            return user_mid, self._insert(c, cid, "assistant", "", False, parent)

    def begin_reply(self, cid: int) -> int:
        """An empty, incomplete assistant message that a stream will fill in."""
        return self.add_message(cid, "assistant", "", complete=False)

    def update_reply(self, mid: int, content: str, reasoning: str | None = None) -> None:
        """Commit the answer and the reasoning streamed so far (still incomplete); pass both
        every time (None: no reasoning yet)."""
        with self._tx() as c:
            c.execute("UPDATE messages SET content = ?, reasoning = ? WHERE id = ?", (content, reasoning, mid))

    def finish_reply(self, mid: int, content: str, *, complete: bool, finish_reason: str,
                     metrics: dict | None = None, error: str | None = None, reasoning: str | None = None,
                     reasoning_open: bool = False, reasoning_tokens: int | None = None,
                     tool_calls: Sequence[ToolCall] = ()) -> None:
        """The reply as it ended: its answer, its reasoning (``reasoning_open``: cut off inside
        it), its tool calls, how it ended and its figures."""
        with self._tx() as c:
            c.execute("UPDATE messages SET content = ?, complete = ?, finish_reason = ?, metrics = ?, "
                      "error = ?, reasoning = ?, reasoning_open = ?, reasoning_tokens = ?, tool_calls = ? "
                      "WHERE id = ?",
                      (content, int(complete), finish_reason,
                       json.dumps(metrics) if metrics is not None else None, error, reasoning,
                       int(reasoning_open), reasoning_tokens, tool_calls_json(tool_calls), mid))

    def hide_from(self, cid: int, mid: int) -> None:
        """Hide message ``mid`` and everything that follows it (a send that failed);
        the screen goes back to the branch beside it. Rows are flagged, not deleted."""
        with self._tx() as c:
            branches.hide_subtree(c, cid, mid)

    # -- branches, pins, search -----------------------------------------------

    def siblings(self, mid: int) -> list[int]:
        """``mid`` and the other versions of it (regenerated or edited), oldest first."""
        return branches.siblings(self._conn, mid)

    def branch_positions(self, cid: int, path: list[int]) -> dict[int, tuple[int, int]]:
        """(place, count) for each message on ``path`` that has alternatives."""
        return branches.positions(self._conn, cid, path)

    def show_branch(self, cid: int, mid: int) -> None:
        """Put the branch through ``mid`` on screen; it stays chosen after a restart."""
        with self._tx() as c:
            if c.execute("SELECT 1 FROM messages WHERE id = ? AND conversation_id = ? AND deleted = 0",
                         (mid, cid)).fetchone() is None:
                raise KeyError(mid)
            branches.show_branch_of(c, cid, mid)

    def set_pinned(self, cid: int, pinned: bool) -> None:
        self._set(cid, "pinned", int(pinned))

    def search_messages(self, text: str, *, reasoning: bool = False) -> list[chat_search.SearchHit]:
        """Messages in live conversations whose text matches every word of ``text``;
        ``reasoning=True`` also searches what replies thought."""
        return chat_search.search(self._conn, text, reasoning=reasoning)

    def all_messages(self, cid: int) -> list[tuple[StoredMessage, int | None]]:
        """Every live message of every branch with its parent id, oldest first."""
        rows = self._conn.execute("SELECT * FROM messages WHERE conversation_id = ? AND deleted = 0 "
                                  "ORDER BY id", (cid,))
        rows = rows.fetchall()
        return list(zip(messages_from(self._conn, rows), [r["parent_id"] for r in rows]))

    def add_tree(self, conv: dict, messages: list[dict], current: int | None) -> int:
        """Create a whole conversation in one transaction (an import); returns its id.

        ``messages`` are in order, each ``parent`` an index of an earlier one (or None), each
        optionally with reasoning, reasoning_open, reasoning_tokens, tool_calls, tool_call_id, parts;
        ``current`` is the index of the message that ends the branch on screen.
        """
        with self._tx() as c:
            think = conv.get("think")
            cid = c.execute("INSERT INTO conversations (title, auto_title, system_prompt, created, updated, "
                            "pinned, think) VALUES (?, 0, ?, ?, ?, ?, ?)",
                            (conv["title"], conv["system_prompt"], conv["created"], conv["updated"],
                             int(conv["pinned"]), json.dumps(think) if think is not None else None)).lastrowid
            ids: list[int] = []
            for m in messages:
                parent = None if m["parent"] is None else ids[m["parent"]]
                ids.append(c.execute(
                    "INSERT INTO messages (conversation_id, role, content, complete, finish_reason, error, "
                    "metrics, created, parent_id, reasoning, reasoning_open, reasoning_tokens, tool_calls, "
                    "tool_call_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (cid, m["role"], m["content"], int(m["complete"]), m["finish_reason"], m["error"],
                     json.dumps(m["metrics"]) if m["metrics"] is not None else None, m["created"],
                     parent, m.get("reasoning"), int(m.get("reasoning_open", False)),
                     m.get("reasoning_tokens"), tool_calls_json(m.get("tool_calls", ())),
                     m.get("tool_call_id"))).lastrowid)
                write_parts(c, ids[-1], m.get("parts", ()))
            branches.set_leaf(c, cid, None if current is None else ids[current])
        return cid

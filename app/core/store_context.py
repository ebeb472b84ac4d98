"""What the store keeps of a conversation that outgrew the context. Qt-free.

Pinned messages (never left out or summarized), the summaries compaction wrote (engine/prompt/
summary.py: each stands for the messages up to ``upto_id`` on its branch, the model's words kept
beside the user's edits), and the chat's own context policy, chosen when a "stop" refused a turn.
No message is ever changed or removed here: only what the model is given changes.
"""
from __future__ import annotations

import json
import sqlite3
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable, Sequence

from engine.prompt import CONTEXT_POLICIES


@dataclass(slots=True, frozen=True)
class Summary:
    """A summary in a conversation: it stands for the ``covers`` messages up to ``upto_id``."""
    id: int
    conversation_id: int
    upto_id: int
    covers: int
    text: str
    written: str          # what the model wrote; ``text`` differs once the user edited it
    metrics: dict | None  # what writing it cost (the reply's stats that carried it)
    created: float

    @property
    def edited(self) -> bool:
        return self.text != self.written


def _summary(row: sqlite3.Row) -> Summary:
    return Summary(row["id"], row["conversation_id"], row["upto_id"], row["covers"], row["text"], row["written"],
                   json.loads(row["metrics"]) if row["metrics"] else None, row["created"])


class ContextRows:
    """The Store's part for pins, summaries and a chat's context policy (one connection, its ``_tx``)."""

    _conn: sqlite3.Connection
    _tx: Callable[[], AbstractContextManager[sqlite3.Connection]]

    def set_message_pinned(self, mid: int, pinned: bool) -> None:
        """Pin message ``mid`` (it stays in the model's view however long the chat grows) or unpin it."""
        with self._tx() as c:
            if c.execute("UPDATE messages SET pinned = ? WHERE id = ?", (int(pinned), mid)).rowcount != 1:
                raise KeyError(mid)

    def add_summary(self, cid: int, upto_id: int, covers: int, text: str, metrics: dict | None = None) -> int:
        """Keep a summary compaction wrote for ``cid``: it stands for its ``covers`` messages up to ``upto_id``."""
        if not text.strip():
            raise ValueError("a summary cannot be empty")
        with self._tx() as c:
            return int(c.execute(
                "INSERT INTO summaries (conversation_id, upto_id, covers, text, written, metrics, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (cid, upto_id, covers, text, text, json.dumps(metrics) if metrics else None, time.time())).lastrowid)

    def edit_summary(self, sid: int, text: str) -> None:
        """The user's words for summary ``sid``: the model is given them from now on (empty: refused)."""
        if not text.strip():
            raise ValueError("a summary cannot be empty: the model would lose what it stands for")
        with self._tx() as c:
            if c.execute("UPDATE summaries SET text = ? WHERE id = ? AND deleted = 0", (text, sid)).rowcount != 1:
                raise KeyError(sid)

    def summaries(self, cid: int) -> list[Summary]:
        """Every live summary of ``cid``, oldest first."""
        rows = self._conn.execute("SELECT * FROM summaries WHERE conversation_id = ? AND deleted = 0 ORDER BY id",
                                  (cid,))
        return [_summary(r) for r in rows]

    def summary_on(self, cid: int, path: Sequence[int]) -> Summary | None:
        """The summary the branch ``path`` (message ids, oldest first) is given: the newest of those
        standing for a message on it (None: none)."""
        on = set(path)
        found = [s for s in self.summaries(cid) if s.upto_id in on]
        return found[-1] if found else None

    def set_context_policy(self, cid: int, policy: str | None) -> None:
        """This chat's own context policy (None: Settings')."""
        if policy is not None and policy not in CONTEXT_POLICIES:
            raise ValueError(f"unknown context policy {policy!r}")
        with self._tx() as c:
            c.execute("UPDATE conversations SET context_policy = ? WHERE id = ?", (policy, cid))

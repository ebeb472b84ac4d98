"""API keys for a server other devices use: generated, shown once, kept only as hashes, each revocable.

A key is 256 random bits (``hearth-`` + 43 URL-safe characters), so an unsalted
SHA-256 is as good as any password hash here: nothing can be guessed from it. The
file lives in the data folder, readable by the user only; it is re-read when it
changes, so a key made or revoked in a terminal (``engine keys``) counts at once
in a running server. Each key has its own request budget (RateLimit), and a default
priority class for its requests that name none (a phone's chat interactive, a batch
job's key background).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ...atomic import atomic_write
from ...errors import HearthError

PREFIX = "hearth-"


def digest(key: str) -> str:
    return hashlib.sha256(key.strip().encode()).hexdigest()


PRIORITIES = ("interactive", "background")  # a key's default class (engine/serve/protocols/scheduling.py)


def check_priority(priority: str) -> str:
    """``priority`` if it is a class a key may default to; else HearthError saying which are."""
    if priority not in PRIORITIES:
        raise HearthError(f"a key's priority is one of {', '.join(PRIORITIES)}, not {priority!r}")
    return priority


@dataclass(frozen=True, slots=True)
class KeyEntry:
    id: str        # a short handle to revoke it by (the first 8 hex digits of its hash)
    name: str      # what the user called it ("laptop", "phone")
    sha256: str
    created: float
    # the class of this key's requests that name no ``priority`` of their own (files from before it: interactive)
    priority: str = "interactive"


class KeyRing:
    """The server's keys, in ``path`` (JSON, mode 0600)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._seen: tuple[float, int] | None = None
        self._entries: tuple[KeyEntry, ...] = ()

    def entries(self) -> tuple[KeyEntry, ...]:
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._seen, self._entries = None, ()
                return ()
            stamp = (st.st_mtime, st.st_size)
            if stamp != self._seen:
                try:
                    rows = json.loads(self.path.read_text(encoding="utf-8"))
                    self._entries = tuple(KeyEntry(**r) for r in rows)
                    for e in self._entries:
                        check_priority(e.priority)
                except (OSError, ValueError, TypeError, HearthError) as e:
                    raise HearthError(f"the server's key file {self.path} is damaged ({e}); remove it and make "
                                      "new keys with `python -m engine keys new NAME`") from None
                self._seen = stamp
            return self._entries

    def create(self, name: str, priority: str = "interactive") -> tuple[KeyEntry, str]:
        """A new key: its entry, and the key itself, which is never stored and cannot be shown again.
        ``priority``: the class of its requests that name none (PRIORITIES)."""
        name = (name or "").strip() or "key"
        key = PREFIX + secrets.token_urlsafe(32)
        h = digest(key)
        entry = KeyEntry(h[:8], name[:64], h, time.time(), check_priority(priority))
        self._write(self.entries() + (entry,))
        return entry, key

    def _find(self, key_id: str) -> KeyEntry:
        found = [e for e in self.entries() if e.id == key_id.strip()]
        if not found:
            raise HearthError(f"no key {key_id!r}; `python -m engine keys list` shows them")
        return found[0]

    def revoke(self, key_id: str) -> KeyEntry:
        gone = self._find(key_id)
        self._write(tuple(e for e in self.entries() if e.id != gone.id))
        return gone

    def set_priority(self, key_id: str, priority: str) -> KeyEntry:
        """Give key ``key_id`` the default class ``priority`` (its next request has it); its new entry."""
        entry = replace(self._find(key_id), priority=check_priority(priority))
        self._write(tuple(entry if e.id == entry.id else e for e in self.entries()))
        return entry

    def match(self, given: str) -> KeyEntry | None:
        """The entry ``given`` is the key of (compared in constant time), or None."""
        h = digest(given)
        found = None
        for e in self.entries():
            if hmac.compare_digest(e.sha256, h):
                found = e
        return found

    def _write(self, entries: tuple[KeyEntry, ...]) -> None:
        atomic_write(self.path, json.dumps([asdict(e) for e in entries], indent=1))
        self.path.chmod(0o600)


class RateLimit:
    """Requests per minute for each key (a token bucket that refills evenly): beyond it, 429 with
    the seconds until the next request is allowed."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, who: str, now: float | None = None) -> float:
        """0 when ``who`` may go now (and it is counted), else the seconds to wait."""
        if self.per_minute <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        rate = self.per_minute / 60.0
        with self._lock:
            tokens, last = self._buckets.get(who, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - last) * rate)
            if tokens >= 1.0:
                self._buckets[who] = (tokens - 1.0, now)
                return 0.0
            self._buckets[who] = (tokens, now)
            return max(1.0, math.ceil((1.0 - tokens) / rate))

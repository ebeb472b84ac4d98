"""Attachments: images and documents, each stored once in the data folder under its SHA-256. Qt-free.

A message refers to an attachment by hash (``ImagePart``/``DocumentPart`` in
engine/messages.py, rows in ``message_parts``); the file lives at
``<data folder>/attachments/<first two hex digits>/<sha256>``. The same bytes
attached twice, in one conversation or in many, are one file.

A file is written atomically (a crash leaves it whole or absent) and read back
only when its bytes still hash to its name: a damaged file is an error, never
wrong content. ``collect`` removes files no message refers to any more; the
window calls it after ``Store.purge_deleted``, so an attachment of a deleted
conversation goes only once the deletion can no longer be undone.
"""
from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from pathlib import Path
from typing import BinaryIO

from engine import atomic_write

from .paths import data_dir

FOLDER = "attachments"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


class AttachmentError(Exception):
    """An attachment that cannot be stored or read; the message says which and why."""


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_of_file(f: BinaryIO) -> str:
    h = hashlib.sha256()
    while chunk := f.read(_CHUNK):
        h.update(chunk)
    return h.hexdigest()


class Attachments:
    """The attachment files of one data folder."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else data_dir() / FOLDER

    def path(self, sha256: str) -> Path:
        if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
            raise AttachmentError(f"not an attachment's name (a SHA-256 in lowercase hex): {sha256!r}")
        return self.root / sha256[:2] / sha256

    def has(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def put(self, data: bytes) -> str:
        """Store ``data`` (once: the same bytes again write nothing) and return its SHA-256."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise AttachmentError(f"an attachment is bytes, not {type(data).__name__}")
        data = bytes(data)
        sha = sha256_of(data)
        target = self.path(sha)
        if not (target.is_file() and target.stat().st_size == len(data)):
            try:
                atomic_write(target, data)
            except OSError as e:
                raise AttachmentError(f"could not store the attachment in {self.root}: {e.strerror or e}") from e
        return sha

    def put_file(self, path: Path | str) -> str:
        """Store a copy of the file at ``path``; returns its SHA-256."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise AttachmentError(f"could not read {path.name}: {e.strerror or e}") from e
        return self.put(data)

    def read(self, sha256: str) -> bytes:
        """The attachment's bytes, checked against its name."""
        target = self.path(sha256)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            raise AttachmentError(f"the attachment {sha256[:12]}… is missing from {self.root}") from None
        except OSError as e:
            raise AttachmentError(f"could not read the attachment {sha256[:12]}…: {e.strerror or e}") from e
        if sha256_of(data) != sha256:
            raise AttachmentError(f"the attachment {sha256[:12]}… is damaged: its bytes no longer match its hash")
        return data

    def stored(self) -> set[str]:
        """Every attachment on disk, by hash."""
        if not self.root.is_dir():
            return set()
        return {p.name for p in self.root.glob("??/*") if p.is_file() and _SHA256.fullmatch(p.name)
                and p.parent.name == p.name[:2]}

    def collect(self, conn: sqlite3.Connection) -> int:
        """Remove every attachment no row of ``message_parts`` refers to (hidden messages
        and flagged conversations still do, so undo keeps working). Returns how many went."""
        used = {row[0] for row in conn.execute("SELECT DISTINCT sha256 FROM message_parts WHERE sha256 IS NOT NULL")}
        gone = 0
        for sha in self.stored() - used:
            try:
                os.unlink(self.path(sha))
                gone += 1
            except FileNotFoundError:
                pass
        for d in self.root.glob("??") if self.root.is_dir() else ():
            try:
                d.rmdir()  # only if empty
            except OSError:
                pass
        return gone

"""Export a conversation as Markdown or JSON, and import a JSON one. Qt-free.

JSON keeps everything: every branch (messages refer to their parent by their
place in the list, not by database ids, so export → import → export gives the
same file), which branch is on screen, the metrics and timestamps. Version 2
gives each message its reasoning, tool calls and parts (attachments by hash)
as fields of their own. Markdown is for reading: the branch on screen only.
An import is checked in full before anything is written, and then written in
one transaction. A version 1 file still imports; its replies that open with a
complete reasoning block are split the way the store's migration splits them.
"""
from __future__ import annotations

import base64
import hashlib
import json

from app.core.store import ROLES, Store
from app.core.store_rows import StoredMessage
from app.core.store_schema import split_think
from engine import HearthError
from engine.prompt import Message

FORMAT = "hearth-conversation"
VERSION = 2
READS = (1, 2)
ROLE_HEADINGS = {"system": "System", "user": "You", "assistant": "Hearth", "tool": "Tool"}


class ImportFailed(ValueError):
    """The file is not a conversation Hearth can import; the message says why."""


def to_dict(store: Store, cid: int) -> dict:
    """The whole conversation (all branches) as plain data."""
    conv = store.conversation(cid)
    rows = store.all_messages(cid)
    index = {m.id: i for i, (m, _p) in enumerate(rows)}
    path = store.messages(cid)
    messages = [_message(m, index.get(parent) if parent is not None else None) for m, parent in rows]
    # The files the messages' parts refer to (documents, images), as base64 by hash: the export is whole.
    files = {}
    for m, _p in rows:
        for part in m.parts:
            sha = getattr(part, "sha256", None)
            if sha and sha not in files and store.attachments.has(sha):
                files[sha] = base64.b64encode(store.attachments.read(sha)).decode("ascii")
    return {"format": FORMAT, "version": VERSION, "title": conv.title, "system_prompt": conv.system_prompt,
            "pinned": conv.pinned, "think": conv.think, "created": conv.created, "updated": conv.updated,
            "current": index[path[-1].id] if path else None, "messages": messages, "attachments": files}


def _message(m: StoredMessage, parent: int | None) -> dict:
    msg = m.as_message()
    return {"parent": parent, "role": m.role, "content": m.content, "reasoning": m.reasoning,
            "reasoning_open": m.reasoning_open, "reasoning_tokens": m.reasoning_tokens,
            "tool_calls": [{"id": t.id, "name": t.name, "arguments": t.arguments} for t in m.tool_calls],
            "tool_call_id": m.tool_call_id,
            "parts": [] if msg.only_text else msg.as_dict()["content"],
            "complete": m.complete, "finish_reason": m.finish_reason,
            "error": m.error, "metrics": m.metrics, "created": m.created}


def to_json(store: Store, cid: int) -> str:
    return json.dumps(to_dict(store, cid), ensure_ascii=False, indent=2) + "\n"


def to_markdown(store: Store, cid: int) -> str:
    """The branch on screen as a readable Markdown document."""
    conv = store.conversation(cid)
    out = [f"# {conv.title}", ""]
    if conv.system_prompt.strip():
        out += ["## System", "", conv.system_prompt, ""]
    for m in store.messages(cid):
        out += [f"## {ROLE_HEADINGS[m.role]}", ""]
        if m.reasoning:
            out += ["> **Reasoning**" + (" (unfinished)" if m.reasoning_open else ""), ">"]
            out += [f"> {line}".rstrip() for line in m.reasoning.splitlines()] + [""]
        if m.content or not (m.tool_calls or m.reasoning):
            out += [m.content, ""]
        for t in m.tool_calls:
            out += [f"**Tool call** `{t.name}`", "", "```json", t.arguments, "```", ""]
        if m.role == "assistant" and not m.complete:
            out += ["*(incomplete)*", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def _field(d: dict, key: str, kinds: tuple[type, ...], where: str, *, optional: bool = False):
    if key not in d:
        if optional:
            return None
        raise ImportFailed(f"{where} has no “{key}”")
    v = d[key]
    if v is None and optional:
        return None
    if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds):
        raise ImportFailed(f"{where}: “{key}” has the wrong type ({type(v).__name__})")
    return v


def parse(text: str) -> tuple[dict, list[dict], int | None]:
    """Check an exported file completely; returns what ``Store.add_tree`` takes."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ImportFailed(f"not a JSON file ({e})") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ImportFailed("not a Hearth conversation export (no \"format\": \"hearth-conversation\")")
    version = data.get("version")
    if version not in READS or isinstance(version, bool):
        raise ImportFailed(f"written by another Hearth version ({version!r}; this one reads "
                           f"{' and '.join(map(str, READS))})")
    num = (int, float)
    conv = {"title": _field(data, "title", (str,), "the file"),
            "system_prompt": _field(data, "system_prompt", (str,), "the file"),
            "pinned": bool(_field(data, "pinned", (bool,), "the file", optional=True)),
            # the Think control's choice here (True/False, an effort such as "high"); absent: the default
            "think": _field(data, "think", (bool, str), "the file", optional=True),
            "created": _field(data, "created", num, "the file"),
            "updated": _field(data, "updated", num, "the file")}
    if not conv["title"].strip():
        raise ImportFailed("the conversation has an empty title")
    raw = _field(data, "messages", (list,), "the file")
    messages: list[dict] = []
    for i, m in enumerate(raw):
        where = f"message {i + 1}"
        if not isinstance(m, dict):
            raise ImportFailed(f"{where} is not an object")
        parent = _field(m, "parent", (int,), where, optional=True)
        if parent is not None and not 0 <= parent < i:
            raise ImportFailed(f"{where}: its parent must be an earlier message (got {parent})")
        role = _field(m, "role", (str,), where)
        if role not in ROLES:
            raise ImportFailed(f"{where}: unknown role {role!r}")
        entry = {"parent": parent, "role": role, "content": _field(m, "content", (str,), where),
                 "complete": _field(m, "complete", (bool,), where),
                 "finish_reason": _field(m, "finish_reason", (str,), where, optional=True),
                 "error": _field(m, "error", (str,), where, optional=True),
                 "metrics": _field(m, "metrics", (dict,), where, optional=True),
                 "created": _field(m, "created", num, where)}
        if version == 1:
            split = split_think(entry["content"]) if role == "assistant" else None
            if split is not None:
                entry["reasoning"], entry["content"] = split
        else:
            entry.update(_v2_fields(m, role, entry["content"], where))
        messages.append(entry)
    current = _field(data, "current", (int,), "the file", optional=True)
    if current is not None and not 0 <= current < len(messages):
        raise ImportFailed(f"“current” points at no message ({current})")
    if current is None and messages:
        raise ImportFailed("“current” is missing: which branch is on screen?")
    return conv, messages, current


def _v2_fields(m: dict, role: str, content: str, where: str) -> dict:
    """A version 2 message's reasoning, tool calls and parts, checked as the engine's Message."""
    tokens = _field(m, "reasoning_tokens", (int,), where, optional=True)
    if tokens is not None and tokens < 0:
        raise ImportFailed(f"{where}: “reasoning_tokens” cannot be negative")
    fields = {"reasoning": _field(m, "reasoning", (str,), where, optional=True),
              "reasoning_open": bool(_field(m, "reasoning_open", (bool,), where, optional=True)),
              "reasoning_tokens": tokens,
              "tool_call_id": _field(m, "tool_call_id", (str,), where, optional=True)}
    calls = _field(m, "tool_calls", (list,), where, optional=True) or []
    parts = _field(m, "parts", (list,), where, optional=True) or []
    try:
        for c in calls:
            if not isinstance(c, dict) or not isinstance(c.get("arguments"), str):
                raise HearthError("each tool call needs an id, a name and its arguments as JSON text")
        msg = Message.from_dict({"role": role, "content": parts or content,
                                 "reasoning_content": fields["reasoning"], "tool_call_id": fields["tool_call_id"],
                                 "tool_calls": [{"id": c.get("id"), "function": {"name": c.get("name"),
                                                 "arguments": c["arguments"]}} for c in calls]})
    except HearthError as e:
        raise ImportFailed(f"{where}: {e}") from e
    if parts and msg.content != content:
        raise ImportFailed(f"{where}: its “content” is not the text of its parts")
    return {**fields, "tool_calls": msg.tool_calls, "parts": () if msg.only_text else msg.parts}


def attachments_of(text: str) -> dict[str, bytes]:
    """The files an export carries, each checked against the hash it is filed under."""
    files = json.loads(text).get("attachments") or {}
    if not isinstance(files, dict):
        raise ImportFailed("“attachments” must be an object of files by their SHA-256")
    out = {}
    for sha, b64 in files.items():
        try:
            data = base64.b64decode(b64, validate=True)
        except (ValueError, TypeError):
            raise ImportFailed(f"the attachment {str(sha)[:16]}… is not base64") from None
        if hashlib.sha256(data).hexdigest() != sha:
            raise ImportFailed(f"the attachment {str(sha)[:16]}… does not match its SHA-256 (damaged file)")
        out[sha] = data
    return out


def import_json(store: Store, text: str) -> int:
    """Add the conversation in ``text`` as a new one (and the files it carries); returns its id."""
    conv, messages, current = parse(text)
    for data in attachments_of(text).values():
        store.attachments.put(data)
    return store.add_tree(conv, messages, current)

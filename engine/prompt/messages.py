"""A chat message as ordered parts, and its rendering for a chat template.

One model for thinking, tool calls, images and documents (see DESIGN.md, "A
message is a list of parts"): a ``Message`` has a role, ordered parts (text,
images and documents by SHA-256), the reasoning that came before its answer,
the tool calls it made and, for a tool's result, the id of the call it answers.

``render`` turns messages into the dicts transformers hands a chat template
(``apply_chat_template``): ``content`` is a string when a message is only text
and a list of content parts otherwise, reasoning goes under
``reasoning_content`` and the names ``alias_reasoning_fields`` fills in, and
tool calls take OpenAI's shape with their arguments as an object.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

from ..errors import HearthError

ROLES = ("system", "user", "assistant", "tool")
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
"""The names a message's reasoning travels under; the first is the one templates read (transformers' order)."""

_SHA256 = re.compile(r"[0-9a-f]{64}")


def _sha256(value: object, what: str) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise HearthError(f"{what} must be a SHA-256 in lowercase hex (64 characters), got {value!r}")
    return value


@dataclass(slots=True, frozen=True)
class TextPart:
    text: str
    kind: ClassVar[str] = "text"

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise HearthError(f"a text part must hold text, not {type(self.text).__name__}")


@dataclass(slots=True, frozen=True)
class ImagePart:
    """An image, stored once in the data folder under its SHA-256.

    ``data``: the file's bytes where the caller has them (the window reads them from its store, the
    API from a data: URL). They are not part of the message's identity or its stored form: the hash is.
    """
    sha256: str
    mime: str
    data: bytes | None = field(default=None, compare=False, repr=False)
    kind: ClassVar[str] = "image"

    def __post_init__(self) -> None:
        _sha256(self.sha256, "an image part's sha256")
        if not isinstance(self.mime, str) or not self.mime.startswith("image/"):
            raise HearthError(f"an image part's mime type must start with 'image/', got {self.mime!r}")


@dataclass(slots=True, frozen=True)
class DocumentPart:
    """A document (PDF, Markdown, code...), stored once under its SHA-256; ``pages``: how many it has."""
    sha256: str
    name: str
    pages: int | None = None
    mime: str = ""
    kind: ClassVar[str] = "document"

    def __post_init__(self) -> None:
        _sha256(self.sha256, "a document part's sha256")
        if not isinstance(self.name, str) or not self.name.strip():
            raise HearthError("a document part needs a name")
        if self.pages is not None and (isinstance(self.pages, bool) or not isinstance(self.pages, int)
                                       or self.pages < 0):
            raise HearthError(f"a document's page count must be a whole number >= 0, got {self.pages!r}")
        if not isinstance(self.mime, str):
            raise HearthError("a document part's mime type must be text")


Part = Union[TextPart, ImagePart, DocumentPart]
PART_TYPES = (TextPart, ImagePart, DocumentPart)


@dataclass(slots=True, frozen=True)
class ToolCall:
    """One call an assistant message makes; ``arguments`` is the JSON text the model wrote."""
    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str):
            raise HearthError(f"a tool call's id must be text, got {type(self.id).__name__}")
        if not isinstance(self.name, str) or not self.name:
            raise HearthError("a tool call needs the name of the tool it calls")
        if not isinstance(self.arguments, str):
            raise HearthError("a tool call's arguments must be JSON text (a str), not "
                              f"{type(self.arguments).__name__}")

    def arguments_value(self) -> Any:
        """The arguments as templates want them: the JSON object, or the text as written when
        it is not one (a call cut short stays readable)."""
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return self.arguments
        return value if isinstance(value, dict) else self.arguments

    def as_dict(self) -> dict[str, Any]:
        """OpenAI's shape, which chat templates read (``tool_call.function.arguments``)."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments_value()}}


@dataclass(slots=True, frozen=True)
class ToolCallDelta:
    """A piece of a tool call while it streams: ``index`` says which call of the reply;
    ``id`` and ``name`` come once, ``arguments`` is the next fragment of JSON text."""
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


def _joined(parts: Sequence[Part]) -> tuple[Part, ...]:
    """Adjacent text parts merged, empty ones dropped: one spelling per message."""
    out: list[Part] = []
    for p in parts:
        if isinstance(p, TextPart):
            if not p.text:
                continue
            if out and isinstance(out[-1], TextPart):
                out[-1] = TextPart(out[-1].text + p.text)
                continue
        out.append(p)
    return tuple(out)


@dataclass(slots=True, frozen=True)
class Message:
    """A chat message. ``Message(role, content)`` is a text message; ``content`` is always the
    message's text (its text parts joined), ``parts`` always its ordered parts."""
    role: str
    content: str = ""
    parts: tuple[Part, ...] = ()
    reasoning: str | None = None         # what the model thought before answering (None: nothing)
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None      # role "tool": the call this is the result of
    # Never left out or summarized when the conversation outgrows the context (engine/prompt/view.py);
    # not part of what the template is given, nor of the message's identity.
    pinned: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise HearthError(f"unknown message role {self.role!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(self.content, str):
            raise HearthError("message content must be text")
        if isinstance(self.parts, (str, bytes)) or not isinstance(self.parts, Sequence):
            raise HearthError("a message's parts must be a sequence of TextPart, ImagePart or DocumentPart")
        for p in self.parts:
            if not isinstance(p, PART_TYPES):
                raise HearthError(f"a message part must be a TextPart, ImagePart or DocumentPart, "
                                  f"not {type(p).__name__}")
        parts = _joined(self.parts)
        if self.parts:
            text = "".join(p.text for p in parts if isinstance(p, TextPart))
            if self.content and self.content != text:
                raise HearthError("a message's content and its text parts differ; give the text one way")
            object.__setattr__(self, "content", text)
        else:
            parts = (TextPart(self.content),) if self.content else ()
        object.__setattr__(self, "parts", parts)
        if self.reasoning is not None:
            if not isinstance(self.reasoning, str):
                raise HearthError("a message's reasoning must be text")
            if self.role != "assistant":
                raise HearthError(f"only an assistant message has reasoning, not a {self.role} message")
        if isinstance(self.tool_calls, (str, bytes, Mapping)) or not isinstance(self.tool_calls, Sequence):
            raise HearthError("a message's tool calls must be a sequence of ToolCall")
        if not all(isinstance(t, ToolCall) for t in self.tool_calls):
            raise HearthError("a message's tool calls must be ToolCall values")
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if self.tool_calls and self.role != "assistant":
            raise HearthError(f"only an assistant message makes tool calls, not a {self.role} message")
        if self.tool_call_id is not None:
            if not isinstance(self.tool_call_id, str):
                raise HearthError("a tool_call_id must be text")
            if self.role != "tool":
                raise HearthError(f"only a tool message answers a tool call, not a {self.role} message")

    @classmethod
    def of(cls, role: str, *parts: Part | str, reasoning: str | None = None,
           tool_calls: Sequence[ToolCall] = (), tool_call_id: str | None = None) -> Message:
        """A message from its parts in order; a plain ``str`` is a text part."""
        return cls(role, parts=tuple(TextPart(p) if isinstance(p, str) else p for p in parts),
                   reasoning=reasoning, tool_calls=tuple(tool_calls), tool_call_id=tool_call_id)

    @property
    def text(self) -> str:
        """The message's text: every text part, in order."""
        return self.content

    @property
    def only_text(self) -> bool:
        return all(isinstance(p, TextPart) for p in self.parts)

    @property
    def attachments(self) -> tuple[ImagePart | DocumentPart, ...]:
        return tuple(p for p in self.parts if not isinstance(p, TextPart))

    def as_dict(self) -> dict[str, Any]:
        """This message as transformers' chat-template input, before the reasoning aliases
        (``render`` adds them). Fields a message does not have are left out, the way
        apply_chat_template drops a None."""
        d: dict[str, Any] = {"role": self.role,
                             "content": self.content if self.only_text else [_part_dict(p) for p in self.parts]}
        if self.reasoning is not None:
            d["reasoning_content"] = self.reasoning
        if self.tool_calls:
            d["tool_calls"] = [t.as_dict() for t in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Message:
        """The inverse of ``as_dict``; also reads reasoning under ``thinking`` or ``reasoning``
        and tool-call arguments given as an object. A bad shape raises HearthError."""
        if not isinstance(d, Mapping):
            raise HearthError(f"a chat message must be a mapping, not {type(d).__name__}")
        content = d.get("content")
        parts: tuple[Part, ...] = ()
        if isinstance(content, list):
            parts = tuple(_part_from(p) for p in content)
            content = ""
        elif content is None:
            content = ""
        reasoning = next((d[k] for k in REASONING_FIELDS if d.get(k) is not None), None)
        calls = d.get("tool_calls") or ()
        if not isinstance(calls, (list, tuple)):
            raise HearthError("a message's tool_calls must be a list")
        return cls(d.get("role", ""), content, parts, reasoning,
                   tuple(_call_from(c) for c in calls), d.get("tool_call_id"))


def _part_dict(p: Part) -> dict[str, Any]:
    if isinstance(p, TextPart):
        return {"type": "text", "text": p.text}
    if isinstance(p, ImagePart):
        return {"type": "image", "sha256": p.sha256, "mime": p.mime}
    return {"type": "document", "sha256": p.sha256, "name": p.name, "pages": p.pages, "mime": p.mime}


def _part_from(p: Any) -> Part:
    kind = p.get("type") if isinstance(p, Mapping) else None
    if kind == "text":
        return TextPart(p.get("text"))
    if kind == "image":
        return ImagePart(p.get("sha256"), p.get("mime"))
    if kind == "document":
        return DocumentPart(p.get("sha256"), p.get("name"), p.get("pages"), p.get("mime") or "")
    raise HearthError(f"unknown content part {kind!r}; expected text, image or document")


def _call_from(c: Any) -> ToolCall:
    if not isinstance(c, Mapping):
        raise HearthError("a tool call must be an object")
    fn = c.get("function", c)
    if not isinstance(fn, Mapping):
        raise HearthError("a tool call's function must be an object")
    args = fn.get("arguments", "{}")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return ToolCall(c.get("id") or "", fn.get("name"), args)  # type: ignore[arg-type]  # checked there


def alias_reasoning_fields(messages: Sequence[Any]) -> list[Any]:
    """What transformers 5 (``_alias_reasoning_fields``) does before rendering: a dict message
    whose reasoning is set under any of REASONING_FIELDS (the first non-None, in that order)
    gets it under ``reasoning_content`` (always, replacing what was there) and ``thinking``
    (only where that key is missing; it goes first). ``reasoning`` is never added. Other
    messages pass unchanged; the input is not modified."""
    out = []
    for m in messages:
        if isinstance(m, dict):
            r = next((m[k] for k in REASONING_FIELDS if m.get(k) is not None), None)
            if r is not None:
                m = {"thinking": r, **m, "reasoning_content": r}
        out.append(m)
    return out


def render(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The ``messages`` a chat template is given for these messages, exactly as transformers
    would build them from the same conversation in OpenAI's shape."""
    return alias_reasoning_fields([m.as_dict() for m in messages])


def merge(a: Message, b: Message) -> Message:
    """Two turns of the same role as one (the text joined by a blank line, as before parts
    existed); reasoning and tool calls of both are kept."""
    reasoning = [r for r in (a.reasoning, b.reasoning) if r is not None]
    return Message(a.role, parts=a.parts + (TextPart("\n\n"),) + b.parts,
                   reasoning="\n\n".join(reasoning) if reasoning else None,
                   tool_calls=a.tool_calls + b.tool_calls, pinned=a.pinned or b.pinned)

"""The reply's answer text, split into free text and tool calls, as it streams.

``ToolCallParser`` reads the answer (after the reasoning parser took out the
reasoning), passes text through until the family's call opener appears (an
opener split across pieces is held back, never shown half), then keeps the call
section and hands out each call once it is complete: parsed, its name one of
the tools offered, its arguments checked against the tool's JSON Schema by a
real validator (``jsonschema``). A call that does not parse or validate raises
``ToolCallError``: never a made-up call (the reply then samples the section again,
decode/resample.py, or ``abandon`` gives its text back). A section still open when
the reply ends (max_tokens, Stop) is no call: ``finish`` gives its text back as
answer text, so nothing the model wrote is lost. ``section_start`` says where in the
text fed the call section began.
"""
from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from ..errors import HearthError
from ..prompt.messages import ToolCall
from .glm_args import read_kv
from .parser import held
from .tool_syntax import ToolSyntax
from .tools import Tool, ToolPlan

_DECODER = json.JSONDecoder()


def parse_arguments(syntax: ToolSyntax, tool: Tool | None, raw: str) -> dict[str, Any]:
    """A call body's arguments as a JSON object (GLM's pairs converted to their schema types)."""
    if syntax.body == "kv":
        return read_kv(tool.parameters if tool else None, raw)
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("the arguments are not a JSON object")
    return value


class ToolCallError(HearthError):
    """The model wrote a tool call that does not parse or does not match its tool's schema."""


class Parsed(NamedTuple):
    kind: str                 # "text" or "call"
    text: str = ""
    call: ToolCall | None = None


class _Cut(Exception):
    """The section ends before this call does: wait for more text."""


class ToolCallParser:
    """One reply's answer text in, text and complete tool calls out."""

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.syntax: ToolSyntax = plan.syntax
        self._fenced = plan.fenced()  # auto: a call may also come as one JSON call in a ```json fence
        self._tools = {t.name: t for t in plan.tools}
        self._buf = ""            # text not yet given out (a possible opener's start)
        self._section: str | None = None  # the call section so far, from its opener on
        self._seen_text = False   # for at_start syntaxes: something other than space came first
        self._done = 0            # calls handed out
        self._ids: list[str] = []
        self.calls: list[ToolCall] = []
        self.closed = False       # the section ended (its closer, or every call the grammar allows)
        self._pos = 0             # where the next call starts in the section
        self.fed = 0              # characters fed so far
        self._abandoned = False   # the section was given up: the rest is text
        self.section_start: int | None = None  # where the section began, in the text fed

    @property
    def in_section(self) -> bool:
        """A call section has opened and has not ended."""
        return self._section is not None and not self.closed

    def abandon(self) -> str:
        """Give up the section from the call that failed to its end: its text, to show as answer
        text; from here on everything fed is text."""
        rest = self._section[self._pos:] if self._section is not None else ""
        self.closed = self._abandoned = True
        self._section = self._section[:self._pos] if self._section is not None else None
        return rest

    def feed(self, text: str) -> list[Parsed]:
        out: list[Parsed] = []
        start = self.fed - len(self._buf)  # where the held text began
        self.fed += len(text)
        if self._abandoned:
            out.append(Parsed("text", text))
            return out
        if self._section is not None:
            self._section += text
            self._calls(out, final=False)
            return out
        self._buf += text
        opener = self.syntax.open
        if self.syntax.at_start:
            if self._seen_text:
                out.append(Parsed("text", self._buf))
                self._buf = ""
                return out
            lead = self._buf.lstrip()
            if not lead:
                return out
            if opener.startswith(lead[:len(opener)]) and len(lead) < len(opener):
                return out
            if lead.startswith(opener):
                self.section_start = start + len(self._buf) - len(lead)
                self._section, self._buf = lead, ""
                self._calls(out, final=False)
            else:
                self._seen_text = True
                out.append(Parsed("text", self._buf))
                self._buf = ""
            return out
        at = self._buf.find(opener)
        fence = self._buf.find(self._fenced.open) if self._fenced is not None else -1
        if fence >= 0 and (at < 0 or fence < at):
            return self._fence(out, start, fence)
        if at >= 0:
            if at:
                out.append(Parsed("text", self._buf[:at]))
            self.section_start = start + at
            self._section, self._buf = self._buf[at:], ""
            self._calls(out, final=False)
            return out
        keep = held(self._buf, (opener,) + ((self._fenced.open,) if self._fenced is not None else ()))
        if len(self._buf) > keep:
            out.append(Parsed("text", self._buf[:len(self._buf) - keep]))
            self._buf = self._buf[len(self._buf) - keep:]
        return out

    def _fence(self, out: list[Parsed], start: int, at: int) -> list[Parsed]:
        """A ```json fence at ``_buf[at]``: a call when it opens with ``{"name": "<a tool>"``, else text;
        held back while it cannot be told."""
        assert self._fenced is not None
        names = {t.name for t in self.plan.offered()}
        verdict = fence_call(self._buf[at:], self._fenced, names)
        if verdict == "wait":
            if at:
                out.append(Parsed("text", self._buf[:at]))
                self._buf = self._buf[at:]
            return out
        if verdict == "text":  # a JSON example, not a call: shown as it is
            end = at + len(self._fenced.open)
            out.append(Parsed("text", self._buf[:end]))
            self._buf = self._buf[end:]
            return out
        if at:
            out.append(Parsed("text", self._buf[:at]))
        self.syntax = self._fenced
        self.section_start = start + at
        self._section, self._buf = self._buf[at:], ""
        self._calls(out, final=False)
        return out

    def finish(self) -> tuple[list[Parsed], str]:
        """What is left at the end of the reply, and the text of a call cut short ("" if none):
        that text is also in the returned events, as answer text."""
        out: list[Parsed] = []
        if self._section is None:
            if self._buf:
                out.append(Parsed("text", self._buf))
            self._buf = ""
            return out, ""
        self._calls(out, final=True)
        rest = self._section[self._pos:]
        if not rest:
            return out, ""
        out.append(Parsed("text", rest))
        return out, "" if self.closed else rest

    # -- the section ----------------------------------------------------------------

    def _calls(self, out: list[Parsed], *, final: bool) -> None:
        assert self._section is not None
        s, sec = self.syntax, self._section
        while not self.closed:
            pos = self._pos
            if s.close and self._done and sec.startswith(s.close, pos):
                self._pos, self.closed = pos + len(s.close), True
                break
            lead = s.open if self._done == 0 else s.join
            if not sec.startswith(lead, pos):
                if self._done and not (len(sec) - pos < len(lead) and lead.startswith(sec[pos:]) and not final) \
                        and not (s.close and s.close.startswith(sec[pos:]) and not final):
                    self.closed = True  # what follows the calls is text again
                return
            try:
                # Llama 3's opener is the call's own first character: it stays part of the JSON.
                end, call = self._one(sec, pos + (0 if s.at_start else len(lead)), final)
            except _Cut:
                return
            self._pos = end
            self._done += 1
            self.calls.append(call)
            out.append(Parsed("call", call=call))
            if not self.plan.many and not s.close:
                self.closed = True

    def _one(self, sec: str, i: int, final: bool) -> tuple[int, ToolCall]:
        """One call starting at ``sec[i]``: where it ends and the call."""
        s = self.syntax
        call_id = s.new_id()
        i = self._expect(sec, i, s.call_open)
        if s.body == "json":
            obj, i = self._json(sec, i, final)
            if not isinstance(obj, dict):
                raise ToolCallError("the model wrote a tool call that is not a JSON object")
            name, args = obj.get(s.name_key), obj.get(s.args_key, {})
            if isinstance(args, str):  # some models write the arguments as a JSON string
                try:
                    args = json.loads(args)
                except ValueError:
                    raise ToolCallError(f"the model's call of {name!r} has arguments that are not JSON") from None
            tool = self._tool(name)
            own = obj.get("id")
            if s.id_in_call and isinstance(own, str) and re.fullmatch(r"[A-Za-z0-9]{9}", own):
                call_id = own
        elif s.body == "name-args":
            j = sec.find(s.args_sep, i)
            if j < 0:
                raise _Cut()
            tool = self._tool(sec[i:j].strip())
            args, i = self._json(sec, j + len(s.args_sep), final)
        else:
            close = sec.find(s.call_close, i)
            if close < 0:
                raise _Cut()
            body = sec[i:close]
            name, _, pairs = body.partition("<arg_key>")
            tool = self._tool(name.strip())
            args = parse_arguments(s, tool, "<arg_key>" + pairs if pairs else "")
            i = close
        i = self._expect(sec, i, s.call_close)
        if not isinstance(args, dict):
            raise ToolCallError(f"the model's call of {tool.name!r} has arguments that are not a JSON object")
        check_arguments(tool, args)
        return i, ToolCall(call_id, tool.name, json.dumps(args, ensure_ascii=False))

    @staticmethod
    def _expect(sec: str, i: int, text: str) -> int:
        """Past ``text`` (spaces around it read leniently) at ``sec[i]``; _Cut while it may still come."""
        j = i
        while j < len(sec) and sec[j] in " \t\r\n":
            j += 1
        want = text.strip()
        if not want:
            return j
        if sec.startswith(want, j):
            return j + len(want)
        if want.startswith(sec[j:]):
            raise _Cut()
        raise ToolCallError(f"the model's tool call is missing {want!r}")

    def _json(self, sec: str, i: int, final: bool) -> tuple[Any, int]:
        m = re.compile(r"\s*").match(sec, i)
        i = m.end() if m else i
        try:
            return _DECODER.raw_decode(sec, i)
        except json.JSONDecodeError as e:
            # Invalid, not unfinished: the call's closer came after it. Without one (the reply
            # ended inside the JSON) it is a call cut short, which finish() gives back as text.
            closer = self.syntax.call_close.strip() or self.syntax.close
            if closer and closer in sec[i:]:
                raise ToolCallError(f"the model's tool call is not valid JSON: {e.msg}") from None
            raise _Cut() from None

    def _tool(self, name: Any) -> Tool:
        if not isinstance(name, str) or name not in self._tools:
            offered = ", ".join(self._tools)
            raise ToolCallError(f"the model called {name!r}, which is not one of the tools offered ({offered})")
        return self._tools[name]


def check_arguments(tool: Tool, args: dict[str, Any]) -> None:
    """Validate ``args`` against the tool's JSON Schema; ToolCallError says what is wrong."""
    import jsonschema

    try:
        jsonschema.validate(args, dict(tool.parameters))
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "the arguments"
        raise ToolCallError(f"the model's call of {tool.name!r} does not match its schema at {where}: "
                            f"{e.message}") from None
    except jsonschema.SchemaError as e:
        raise ToolCallError(f"the schema of {tool.name!r} is not a valid JSON Schema: {e.message}") from None


_FENCE_HEAD = re.compile(r'\s*\{\s*"([^"]*)"\s*:\s*"((?:[^"\\]|\\.)*)"')


def fence_call(text: str, fenced: ToolSyntax, names: set[str]) -> str:
    """Whether ``text`` (from a fence on) opens a call: "call" (``{"name": "<one of names>"``),
    "text" (anything else: a JSON example stays text) or "wait" (it could still become a call)."""
    body = text[len(fenced.open):]
    m = _FENCE_HEAD.match(body)
    if m is not None:
        return "call" if m.group(1) == fenced.name_key and m.group(2) in names else "text"
    squeezed = re.sub(r"\s+", "", body)  # white space is free between the head's pieces
    head = '{"' + fenced.name_key + '":"'
    if len(squeezed) <= len(head):
        return "wait" if head.startswith(squeezed) else "text"
    if not squeezed.startswith(head):
        return "text"
    partial = squeezed[len(head):]
    return "wait" if any(n.startswith(partial) for n in names) else "text"

"""Anthropic's Messages wire format (``POST /v1/messages``): request bodies checked into
the same :class:`ApiRequest` the OpenAI path builds, replies and errors shaped the way
the official ``anthropic`` client (and Claude Code) reads them. No HTTP here.

What is read: ``system`` (a string or text blocks), ``messages`` whose content is a
string or text blocks (a ``system`` message among them, as Claude Code sends, joins the turn
before it) (``cache_control`` is accepted and changes nothing: the prefix
cache is automatic), an assistant turn's ``thinking`` blocks as its reasoning,
``max_tokens`` (required, as Anthropic's API requires it), ``stop_sequences``,
``temperature``, ``top_p``, ``top_k``, ``stream``, ``thinking`` (enabled or disabled:
the model's own thinking switch, where its template has one; ``budget_tokens``, the thinking
budget), ``priority`` (scheduling.py), ``output_config``'s JSON
schema (a grammar, as ``response_format`` is on the OpenAI path) and ``effort`` (the
template's ``reasoning_effort``), llama-server's ``grammar``, and tool use: ``tools``,
``tool_choice``, ``tool_use`` and ``tool_result`` blocks (anthropic_blocks.py). A reply's
calls are ``tool_use`` blocks with ``stop_reason: tool_use``; streamed, each is a
content_block_start (input ``{}``), one ``input_json_delta`` with the whole input, and
its content_block_stop. What would change the reply and is not supported is a 400 that
says so: Anthropic's server tools, image blocks by URL or file, and a last assistant message to
continue (a prefill).

Usage counts as Anthropic's do: ``input_tokens`` are the prompt tokens computed for
this request, ``cache_read_input_tokens`` those read from the prefix cache (OpenAI's
``prompt_tokens`` holds both); nothing is written to a billed cache, so
``cache_creation_input_tokens`` is 0. A thinking model's reasoning is a ``thinking``
block before the ``text`` block, with an empty ``signature`` (nothing here signs it).
"""
from __future__ import annotations

import json
import uuid
from typing import Any

from ...prompt.messages import Message, TextPart, ToolCall
from ...types import StreamEvent
from .anthropic_blocks import parse_anthropic_tools, tool_use, turn
from .openai import ApiError, ApiRequest, bad, grammar_of, head, number, raw_grammar_scope
from .scheduling import thinking_budget
from .template_vars import short

MAX_STOP_SEQUENCES = 16
# output_config.effort -> the template's reasoning_effort (templates know low, medium and high)
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
STOP_REASONS = {"eos": "end_turn", "tool_calls": "tool_use", "stop_string": "stop_sequence", "max_tokens": "max_tokens",
                "context_full": "model_context_window_exceeded", "cancelled": "end_turn"}
# Anthropic's error types by HTTP status; a model that is not ready is "overloaded" (529): try again.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}


def error_status(e: ApiError) -> int:
    return 529 if e.status == 503 else e.status


def error_body(e: ApiError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``."""
    status = error_status(e)
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": e.message}}


# -- requests ------------------------------------------------------------------------


def _system(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v or None
    if not isinstance(v, list):
        raise bad("system", "system must be a string or a list of text blocks")
    return "".join(m.content for m in turn(v, "system", "system")) or None


def _messages(raw: Any, system: str | None) -> list[Message]:
    if not isinstance(raw, list) or not raw:
        raise bad("messages", "messages must be a non-empty list of {role, content} objects")
    out = [Message("system", system)] if system else []
    for i, m in enumerate(raw):
        at = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(at, f"{at} must be an object with a role and a content")
        role = m.get("role")
        if role not in ("user", "assistant", "system"):
            raise bad(f"{at}.role", f"{at}.role must be user or assistant, got {short(role)}")
        c = m.get("content")
        if role == "system":
            _fold_system(out, c if isinstance(c, str) else _system_text(c, f"{at}.content"))
        elif isinstance(c, str):
            out.append(Message(role, c))
        elif isinstance(c, list):
            out += turn(c, f"{at}.content", role)
        else:
            raise bad(f"{at}.content", f"{at}.content must be a string or a list of content blocks")
    if out[-1].role == "assistant":
        raise bad(f"messages[{len(raw) - 1}]", "a last assistant message to continue (a prefill) is not "
                                               "supported yet; end with a user message")
    return out


def _system_text(c: Any, at: str) -> str:
    if not isinstance(c, list):
        raise bad(at, f"{at} must be a string or a list of text blocks")
    return "".join(m.content for m in turn(c, at, "system"))


def _fold_system(out: list[Message], text: str) -> None:
    """A system message among ``messages`` (Claude Code sends its reminders so) joins the turn
    before it: the system prompt, or the user's turn, as more text; otherwise it is a user turn
    of its own. Chat templates take one system prompt, first, and many refuse roles that do not
    alternate, so it is never a second system message."""
    if not text:
        return
    last = out[-1] if out else None
    if last is not None and last.role in ("system", "user"):
        out[-1] = Message(last.role, parts=(*last.parts, TextPart("\n\n" + text)))
    else:
        out.append(Message("user", text))


def _thinking(v: Any) -> bool | None:
    if v is None:
        return None
    kind = v.get("type") if isinstance(v, dict) else None
    if kind not in ("enabled", "adaptive", "disabled"):
        raise bad("thinking", "thinking must be {\"type\": \"enabled\"}, {\"type\": \"adaptive\"} or "
                              "{\"type\": \"disabled\"}")
    return kind != "disabled"


def _output(body: dict) -> tuple[str | None, dict[str, Any] | None]:
    """``output_config``'s JSON schema as GBNF (or llama-server's ``grammar``, as the OpenAI path
    takes it), and its ``effort`` as the chat template's ``reasoning_effort``."""
    oc = body.get("output_config")
    if oc is None:
        oc = {}
    if not isinstance(oc, dict):
        raise bad("output_config", "output_config must be an object")
    fmt, effort = oc.get("format"), oc.get("effort")
    if fmt is not None and body.get("grammar") is not None:
        raise bad("grammar", "give grammar or output_config.format, not both")
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
            raise bad("output_config.format", "output_config.format must be {\"type\": \"json_schema\", "
                                              "\"schema\": {...}}")
        gbnf = grammar_of({"response_format": {"type": "json_schema", "json_schema": {"schema": fmt.get("schema")}}})
    else:
        gbnf = grammar_of({"grammar": body["grammar"]}) if body.get("grammar") is not None else None
    if effort is None:
        return gbnf, None
    if effort not in EFFORTS:
        raise bad("output_config.effort", f"output_config.effort must be one of {', '.join(EFFORTS)}, "
                                          f"got {short(effort)}")
    return gbnf, {"reasoning_effort": EFFORTS[effort]}


def parse_anthropic(body: Any) -> ApiRequest:
    """Check a ``/v1/messages`` body; raises ApiError naming the field at fault."""
    body, model = head(body)
    mt = body.get("max_tokens")
    if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
        raise bad("max_tokens", f"max_tokens is required: a whole number of at least 1, got {short(mt)}")
    messages = _messages(body.get("messages"), _system(body.get("system")))
    s: dict[str, Any] = {}
    for key, lo, hi, integer in (("temperature", 0, 1, False), ("top_p", 0, 1, False), ("top_k", 0, 1 << 20, True)):
        v = number(body, key, lo, hi, integer=integer)
        if v is not None:
            s[key] = v
    if s.get("top_p") == 0:
        raise bad("top_p", "top_p must be above 0")
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(x, str) for x in stops):
            raise bad("stop_sequences", "stop_sequences must be a list of strings")
        if len(stops) > MAX_STOP_SEQUENCES:
            raise bad("stop_sequences", f"stop_sequences takes at most {MAX_STOP_SEQUENCES} strings")
        s["stop"] = tuple(x for x in stops if x)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream", "stream must be true or false")
    thinking = _thinking(body.get("thinking"))
    budget = thinking_budget(body.get("thinking"))
    if budget is not None:
        s["reasoning_budget"] = budget  # the most the model thinks for; then its block is closed
    gbnf, template_kwargs = _output(body)
    tools, choice, parallel = parse_anthropic_tools(body)
    if tools and gbnf is not None:
        raise bad("tools", "give tools or output_config.format (or grammar), not both: the tools' own grammar "
                           "shapes every call")
    return ApiRequest(kind="chat", model=model, messages=messages, sampling=s, max_tokens=mt, stream=stream,
                      grammar=gbnf, grammar_scope=raw_grammar_scope(body), template_kwargs=template_kwargs,
                      thinking=thinking,
                      tools=tools, tool_choice=choice, parallel_tool_calls=parallel)


# -- replies ---------------------------------------------------------------------------


def anthropic_usage(final_or_first: StreamEvent) -> dict[str, Any]:
    """Anthropic's usage from an event's stats: input tokens exclude those the cache held."""
    st = final_or_first.stats
    prompt, cached = (st.prompt_tokens, st.cached_tokens) if st is not None else (0, 0)
    out: dict[str, Any] = {"input_tokens": prompt - cached, "output_tokens": st.generated_tokens if st else 0,
                           "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}
    if st is not None and st.reasoning_tokens:
        out["output_tokens_details"] = {"thinking_tokens": st.reasoning_tokens}
    return out


def _sse(kind: str, data: dict[str, Any]) -> dict[str, str]:
    return {"event": kind, "data": json.dumps({"type": kind, **data})}


class MessageReply:
    """One ``/v1/messages`` reply: the message object, or its stream of named events."""

    def __init__(self, model: str, first: StreamEvent) -> None:
        self.model, self.first = model, first
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self._block: str | None = None   # the kind of the content block open in the stream
        self._index = -1

    def _message(self, content: list, stop_reason: str | None, stop_sequence: str | None,
                 use: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": use}

    @staticmethod
    def _stop(final: StreamEvent) -> tuple[str, str | None]:
        reason = STOP_REASONS.get(final.finish_reason or "", "end_turn")
        return reason, (final.stop_string if reason == "stop_sequence" else None)

    def whole(self, final: StreamEvent) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if final.reasoning:
            content.append({"type": "thinking", "thinking": final.reasoning, "signature": ""})
        if final.text or not (content or final.tool_calls):
            content.append({"type": "text", "text": final.text})
        content += [tool_use(c) for c in final.tool_calls]
        return self._message(content, *self._stop(final), anthropic_usage(final))

    def _open(self, kind: str) -> list[dict[str, str]]:
        out = self._close()
        self._block, self._index = kind, self._index + 1
        block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else \
            {"type": "text", "text": ""}
        return out + [_sse("content_block_start", {"index": self._index, "content_block": block})]

    def _close(self) -> list[dict[str, str]]:
        if self._block is None:
            return []
        out = []
        if self._block == "thinking":
            out.append(_sse("content_block_delta", {"index": self._index,
                                                    "delta": {"type": "signature_delta", "signature": ""}}))
        self._block = None
        return out + [_sse("content_block_stop", {"index": self._index})]

    def opening(self) -> list[dict[str, str]]:
        start = {**anthropic_usage(self.first), "output_tokens": 0}
        start.pop("output_tokens_details", None)
        return [_sse("message_start", {"message": self._message([], None, None, start)})]

    def _call(self, ev: StreamEvent) -> list[dict[str, str]]:
        """A whole call: its tool_use block (input {}), its input as one input_json_delta, its stop."""
        d = ev.tool_call
        assert d is not None and d.id is not None and d.name is not None  # each call comes whole
        out = self._close()
        self._index += 1
        block = tool_use(ToolCall(d.id, d.name, "{}"))
        out.append(_sse("content_block_start", {"index": self._index, "content_block": block}))
        out.append(_sse("content_block_delta", {"index": self._index, "delta": {
            "type": "input_json_delta", "partial_json": d.arguments}}))
        return out + [_sse("content_block_stop", {"index": self._index})]

    def event(self, ev: StreamEvent) -> list[dict[str, str]]:
        if ev.kind == "tool_call":
            return self._call(ev)
        if not ev.text or ev.kind not in ("delta", "reasoning"):
            return []
        kind = "thinking" if ev.kind == "reasoning" else "text"
        out = self._open(kind) if self._block != kind else []
        delta = {"type": "thinking_delta", "thinking": ev.text} if kind == "thinking" else \
            {"type": "text_delta", "text": ev.text}
        return out + [_sse("content_block_delta", {"index": self._index, "delta": delta})]

    def closing(self, final: StreamEvent) -> list[dict[str, str]]:
        out = self._open("text") if self._index < 0 else []  # a reply of nothing is one empty text block
        reason, seq = self._stop(final)
        out += self._close()
        out.append(_sse("message_delta", {"delta": {"stop_reason": reason, "stop_sequence": seq},
                                          "usage": anthropic_usage(final)}))
        return out + [_sse("message_stop", {})]

    def failure(self, e: ApiError) -> list[dict[str, str]]:
        return [{"event": "error", "data": json.dumps(error_body(e))}]

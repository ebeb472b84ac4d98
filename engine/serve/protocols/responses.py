"""OpenAI's Responses wire format (``POST /v1/responses``): request bodies checked into the
same :class:`ApiRequest` the chat path builds, replies shaped as the ``openai`` client's
``client.responses`` reads them. No HTTP here.

What is read: ``input`` (a string, or message items whose content is a string or
``input_text`` / ``output_text`` parts), ``instructions`` (a system message for this
request only, as OpenAI's API treats it), ``max_output_tokens``, ``temperature``,
``top_p``, ``stream``, ``text.format`` (``json_schema`` / ``json_object``, enforced by a
grammar; or llama-server's ``grammar``), ``reasoning.effort`` (the template's ``reasoning_effort``) and
``previous_response_id``: the conversation of a response this server produced, kept in
memory (the latest 256; ``store: false`` keeps none), a 404 for any other id; function
tools: ``tools`` (``{type: function, name, description, parameters, strict}``, or namespaces of
them; hosted tools are left out with a note: responses_tools.py),
``tool_choice`` and ``parallel_tool_calls``, with ``function_call`` and
``function_call_output`` input items (responses_input.py). A reply's calls are
``function_call`` output items; streamed, each is output_item.added, one
function_call_arguments.delta with the whole arguments, .done, and output_item.done. Other
item types and input_image parts by URL or file are a 400 that says so.

A thinking model's reasoning is a ``reasoning`` output item (its text as ``reasoning_text``
content) before the message; usage counts as the chat path's does (``input_tokens`` holds
the cached ones, ``input_tokens_details.cached_tokens`` says how many).
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any

from ...prompt.messages import Message, ToolCall
from ...types import StreamEvent
from ...reply_formats.tools import Tool
from .context import context_policy
from .openai import ApiError, ApiRequest, bad, grammar_of, head, number, raw_grammar_scope
from .openai_tools import parse_openai_tools
from .responses_input import call_item, new_item_id, read_input
from .responses_tools import ResponsesTools, read_responses_tools
from .template_vars import TemplateVarsError, reasoning_effort, short

KEEP = 256  # responses whose conversation previous_response_id can continue


class ResponseStore:
    """The conversations of the latest responses, by id (thread-safe, oldest dropped first)."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._items: OrderedDict[str, tuple[Message, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, rid: str) -> tuple[Message, ...] | None:
        with self._lock:
            return self._items.get(rid)

    def put(self, rid: str, conversation: tuple[Message, ...]) -> None:
        with self._lock:
            self._items[rid] = conversation
            while len(self._items) > self.keep:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


# -- requests ------------------------------------------------------------------------


def _format(body: dict) -> str | None:
    """``text.format`` as GBNF, or llama-server's ``grammar`` (as the chat path takes it)."""
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if text is not None and not isinstance(text, dict):
        raise bad("text", "text must be an object ({\"format\": {...}})")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return grammar_of({"grammar": body["grammar"]}) if body.get("grammar") is not None else None
    if body.get("grammar") is not None:
        raise bad("grammar", "give grammar or text.format, not both")
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_schema", "json_object"):
        raise bad("text.format", "text.format.type must be text, json_object or json_schema")
    if fmt["type"] == "json_object":
        return grammar_of({"response_format": {"type": "json_object"}})
    return grammar_of({"response_format": {"type": "json_schema", "json_schema": {"schema": fmt.get("schema")}}})


def parse_responses(body: Any, store: ResponseStore) -> ApiRequest:
    """Check a ``/v1/responses`` body; ``store`` holds the conversations previous_response_id names."""
    body, model = head(body)
    earlier: tuple[Message, ...] = ()
    prev = body.get("previous_response_id")
    if prev is not None:
        found = store.get(prev) if isinstance(prev, str) else None
        if found is None:
            raise ApiError(404, f"no response {short(prev)} to continue: this server keeps its latest {store.keep} "
                                "responses, in memory, while it runs", param="previous_response_id",
                           code="previous_response_not_found")
        earlier = found
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad("instructions", "instructions must be a string")
    mt = body.get("max_output_tokens")
    if mt is not None and (isinstance(mt, bool) or not isinstance(mt, int) or mt < 1):
        raise bad("max_output_tokens", f"max_output_tokens must be a whole number of at least 1, got {short(mt)}")
    sampling: dict[str, Any] = {}
    for key, lo, hi in (("temperature", 0, 2), ("top_p", 0, 1)):
        v = number(body, key, lo, hi)
        if v is not None:
            sampling[key] = v
    if sampling.get("top_p") == 0:
        raise bad("top_p", "top_p must be above 0")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream", "stream must be true or false")
    kw = None
    r = body.get("reasoning")
    if isinstance(r, dict) and r.get("effort") is not None:
        try:
            kw = {"reasoning_effort": reasoning_effort(r["effort"])}
        except TemplateVarsError as e:
            raise bad("reasoning.effort", str(e)) from None
    wire_tools = ResponsesTools()
    tools, choice, parallel = _tools(body, wire_tools)
    said = read_input(body.get("input"), wire_tools.model_name)
    conversation = (*earlier, *said)
    messages = [Message("system", instructions)] if instructions else []
    keep = body.get("store", True) is not False
    gbnf = _format(body)
    if tools and gbnf is not None:
        raise bad("tools", "give tools or text.format (or grammar), not both: the tools' own grammar shapes "
                           "every call")
    extra = {"conversation": conversation if keep else None, "previous_response_id": prev,
             "instructions": instructions, "max_output_tokens": mt, **sampling,
             "tools": body.get("tools") or [], "tool_choice": body.get("tool_choice") or "auto",
             "parallel_tool_calls": parallel, "wire_tools": wire_tools}
    note = wire_tools.note()
    return ApiRequest(kind="chat", model=model, messages=[*messages, *conversation], sampling=sampling,
                      max_tokens=mt, stream=stream, grammar=gbnf, grammar_scope=raw_grammar_scope(body),
                      template_kwargs=kw, extra=extra, context_policy=context_policy(body),
                      tools=tools, tool_choice=choice, parallel_tool_calls=parallel, notes=[note] if note else [])


def _tools(body: dict, into: ResponsesTools) -> tuple[tuple[Tool, ...], str, bool]:
    """Function tools, flat or in namespaces (responses_tools.py), read ``into`` what the reply
    needs to name their calls; hosted tools are left out with a note."""
    def read() -> tuple[Tool, ...]:
        found = read_responses_tools(body.get("tools"))
        into.namespaced, into.skipped = found.namespaced, found.skipped
        return found.tools

    return parse_openai_tools(body, flat=True, read=read)


# -- replies ---------------------------------------------------------------------------


def responses_usage(ev: StreamEvent) -> dict[str, Any]:
    st = ev.stats
    prompt, cached, out, reasoning = (st.prompt_tokens, st.cached_tokens, st.generated_tokens,
                                      st.reasoning_tokens) if st is not None else (0, 0, 0, 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + out}


class ResponseReply:
    """One ``/v1/responses`` reply: the response object, or its stream of typed events.
    A finished reply's conversation goes into ``store`` under the response's id."""

    def __init__(self, req: ApiRequest, model: str, store: ResponseStore) -> None:
        self.req, self.model, self.store = req, model, store
        self.id = f"resp_{uuid.uuid4().hex[:24]}"
        self.msg_id, self.rs_id = f"msg_{uuid.uuid4().hex[:24]}", f"rs_{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self._seq = -1
        self._open: str | None = None   # "reasoning" or "message": the item the stream is writing
        self._items: list[dict[str, Any]] = []
        self._texts: dict[str, str] = {"reasoning": "", "message": ""}
        self._names = req.extra.get("wire_tools", ResponsesTools()).wire_name

    # -- the objects --

    def _response(self, status: str, output: list, use: dict[str, Any] | None,
                  incomplete: str | None = None) -> dict[str, Any]:
        x = self.req.extra
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "model": self.model, "output": output, "error": None,
                "incomplete_details": {"reason": incomplete} if incomplete else None,
                "instructions": x.get("instructions"), "max_output_tokens": x.get("max_output_tokens"),
                "previous_response_id": x.get("previous_response_id"), "temperature": x.get("temperature"),
                "top_p": x.get("top_p"), "parallel_tool_calls": x.get("parallel_tool_calls", True),
                "tool_choice": x.get("tool_choice", "auto"), "tools": x.get("tools", []),
                "truncation": "disabled" if self.req.context_policy == "error" else "auto",
                "text": {"format": {"type": "text"}}, "metadata": {}, "usage": use}

    def _item(self, kind: str, text: str, status: str) -> dict[str, Any]:
        if kind == "reasoning":
            return {"type": "reasoning", "id": self.rs_id, "status": status, "summary": [],
                    "content": [{"type": "reasoning_text", "text": text}]}
        return {"type": "message", "id": self.msg_id, "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}

    def _finish(self, final: StreamEvent) -> tuple[str, str | None]:
        conversation = self.req.extra.get("conversation")
        if conversation is not None and final.finish_reason != "cancelled":
            self.store.put(self.id, (*conversation, Message("assistant", final.text, reasoning=final.reasoning,
                                                            tool_calls=final.tool_calls)))
        if final.finish_reason in ("max_tokens", "context_full"):
            return "incomplete", "max_output_tokens"
        return "completed", None

    def whole(self, final: StreamEvent) -> dict[str, Any]:
        status, why = self._finish(final)
        item_status = "incomplete" if why else "completed"
        output = [self._item("reasoning", final.reasoning, item_status)] if final.reasoning else []
        if final.text or not (output or final.tool_calls):
            output.append(self._item("message", final.text, item_status))
        output += [call_item(c, new_item_id(), names=self._names) for c in final.tool_calls]
        return self._response(status, output, responses_usage(final), why)

    # -- the stream --

    def _sse(self, kind: str, **data: Any) -> dict[str, str]:
        self._seq += 1
        return {"event": kind, "data": json.dumps({"type": kind, "sequence_number": self._seq, **data})}

    def _part(self, kind: str) -> dict[str, Any]:
        return {"type": "reasoning_text", "text": self._texts[kind]} if kind == "reasoning" else \
            {"type": "output_text", "text": self._texts[kind], "annotations": []}

    def _start(self, kind: str) -> list[dict[str, str]]:
        out = self._end("completed")
        self._open = kind
        index = len(self._items)
        item = self._item(kind, "", "in_progress")
        item["content"] = []
        out.append(self._sse("response.output_item.added", output_index=index, item=item))
        if kind == "message":
            out.append(self._sse("response.content_part.added", item_id=self.msg_id, output_index=index,
                                 content_index=0, part=self._part(kind)))
        return out

    def _end(self, status: str) -> list[dict[str, str]]:
        kind = self._open
        if kind is None:
            return []
        self._open = None
        index, text = len(self._items), self._texts[kind]
        item = self._item(kind, text, status)
        self._items.append(item)
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if kind == "reasoning":
            out = [self._sse("response.reasoning_text.done", **ids, text=text)]
        else:
            out = [self._sse("response.output_text.done", **ids, text=text, logprobs=[]),
                   self._sse("response.content_part.done", **ids, part=self._part(kind))]
        return out + [self._sse("response.output_item.done", output_index=index, item=item)]

    def opening(self) -> list[dict[str, str]]:
        shell = self._response("in_progress", [], None)
        return [self._sse("response.created", response=shell), self._sse("response.in_progress", response=shell)]

    def _call(self, ev: StreamEvent) -> list[dict[str, str]]:
        """A whole call: its item added, its arguments as one delta, then done."""
        d = ev.tool_call
        assert d is not None and d.id is not None and d.name is not None  # each call comes whole
        out = self._end("completed")
        call, index, fid = ToolCall(d.id, d.name, d.arguments), len(self._items), new_item_id()
        ids = {"item_id": fid, "output_index": index}
        out += [self._sse("response.output_item.added", output_index=index,
                          item=call_item(call, fid, "in_progress", arguments="", names=self._names)),
                self._sse("response.function_call_arguments.delta", **ids, delta=d.arguments),
                self._sse("response.function_call_arguments.done", **ids, name=self._names(d.name)[0],
                          arguments=d.arguments)]
        self._items.append(call_item(call, fid, names=self._names))
        return out + [self._sse("response.output_item.done", output_index=index, item=self._items[-1])]

    def event(self, ev: StreamEvent) -> list[dict[str, str]]:
        if ev.kind == "tool_call":
            return self._call(ev)
        if not ev.text or ev.kind not in ("delta", "reasoning"):
            return []
        kind = "reasoning" if ev.kind == "reasoning" else "message"
        out = self._start(kind) if self._open != kind else []
        self._texts[kind] += ev.text
        ids = {"item_id": self.rs_id if kind == "reasoning" else self.msg_id, "output_index": len(self._items),
               "content_index": 0}
        name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra: dict[str, Any] = {} if kind == "reasoning" else {"logprobs": []}
        return out + [self._sse(name, **ids, delta=ev.text, **extra)]

    def closing(self, final: StreamEvent) -> list[dict[str, str]]:
        status, why = self._finish(final)
        out = self._start("message") if not self._items and self._open is None else []
        out += self._end("incomplete" if why else "completed")
        done = self._response(status, self._items, responses_usage(final), why)
        return out + [self._sse("response.incomplete" if why else "response.completed", response=done)]

    def failure(self, e: ApiError) -> list[dict[str, str]]:
        return [self._sse("error", code=e.code, message=e.message, param=e.param)]

"""The OpenAI wire format: request bodies checked and turned into Hearth's types,
replies shaped the way the official clients read them. No HTTP here.

Every bad field raises ApiError naming the field (``param``), so a client gets a
400 that says what to fix instead of a reply that quietly ignored it. Fields
that change nothing here (``user``, ``metadata``, ``store``...) are accepted;
fields that would change the reply and are not supported (``n > 1``,
``logprobs``) are refused.

Tools follow OpenAI's function calling: ``tools``, ``tool_choice`` (auto, required,
none, or a named function), ``parallel_tool_calls``; a reply that calls has
``message.tool_calls`` (streamed: ``delta.tool_calls``, each call whole in one
delta) and ``finish_reason: tool_calls``; ``role: tool`` messages with their
``tool_call_id`` go back into the template. Hearth never runs a tool the API
asked for: the calls go to the client, which runs them. ``grammar`` (GBNF text, as llama-server takes it) is
accepted beside the standard fields, and so is ``ignore_eos`` (llama-server's and vLLM's: decode on past
the end of the reply, to ``max_tokens``; what serving benchmarks send).

Thinking models follow the convention DeepSeek's API, vLLM and llama-server
share: a reply's reasoning travels as ``reasoning_content`` beside ``content``
(in ``message`` and in each streamed ``delta``, left out when there is none),
assistant turns sent back may carry it (or ``reasoning``/``thinking``), and
``usage.completion_tokens_details.reasoning_tokens`` counts it. A request's
``reasoning_effort`` and ``chat_template_kwargs`` reach the chat template as
variables, checked first (template_vars.py: templates are untrusted code).
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ...reply_formats.tools import Tool
from ...prompt.messages import REASONING_FIELDS, Part, TextPart, ToolCall
from .errors import ApiError, bad  # noqa: F401  (ApiError: re-exported, the server raises it)
from .images import image_part
from .openai_tools import parse_openai_tools, tool_calls as _tool_calls, wire_call
from ...decode.metrics import openai_finish_reason
from ...prompt.messages import Message
from .template_vars import TemplateVarsError, chat_template_kwargs, reasoning_effort, short

CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
              "tool": "tool"}
MAX_STOP = 4


@dataclass(slots=True)
class ApiRequest:
    """One checked request: what to generate and how to answer."""
    kind: str                              # "chat" or "completion"
    model: str
    messages: list[Message] | None = None  # chat
    prompt: str | None = None              # completion
    sampling: dict[str, Any] = field(default_factory=dict)  # SamplingParams fields the client set
    max_tokens: int | None = None          # None: until the context is full
    grammar: str | None = None             # GBNF text from response_format or grammar
    # what the grammar shapes: "reply" for llama-server's raw ``grammar`` (every token, a thinking model's
    # block included, as llama-server applies it); "answer" for a response format (after the reasoning)
    grammar_scope: str = "answer"
    stream: bool = False
    include_usage: bool = False
    # chat: variables for the chat template (chat_template_kwargs, reasoning_effort); None: none given
    template_kwargs: dict[str, Any] | None = None
    tools: tuple[Tool, ...] = ()           # chat: the functions offered (none with tool_choice "none")
    tool_choice: str = "auto"              # "auto", "required" or a function's name
    parallel_tool_calls: bool = True
    # a protocol's own thinking switch (Anthropic's ``thinking``): the model's switch, where it has one
    thinking: bool | None = None
    # what a wire format keeps for its reply (the Responses API: the conversation, what to echo)
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the server left out, for X-Hearth-Note
    priority: int | None = None  # the engine core's class the client asked for (scheduling.py); None: its key's


def number(body: dict, key: str, lo: float, hi: float, *, integer: bool = False) -> float | int | None:
    """``body[key]`` checked to be a number (``integer``: a whole one) in [lo, hi]; None when absent."""
    v = body.get(key)
    if v is None:
        return None
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok:
        raise bad(key, f"{key} must be {'a whole number' if integer else 'a number'}, got {short(v)}")
    if not lo <= v <= hi:
        raise bad(key, f"{key} must be between {lo:g} and {hi:g}, got {v!r}")
    return v


def _stop(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise bad("stop", "stop must be a string or a list of strings")
    if len(items) > MAX_STOP:
        raise bad("stop", f"stop takes at most {MAX_STOP} strings, got {len(items)}")
    return tuple(s for s in items if s)


def _content(m: dict, i: int) -> tuple[Part, ...]:
    """A message's content as parts: text, and in a user message ``image_url`` parts (data: URLs)."""
    c = m.get("content")
    if c is None:
        return ()
    if isinstance(c, str):
        return (TextPart(c),) if c else ()
    if isinstance(c, list):
        parts: list[Part] = []
        for j, p in enumerate(c):
            kind = p.get("type") if isinstance(p, dict) else type(p).__name__
            if kind == "text" and isinstance(p.get("text"), str):
                parts.append(TextPart(p["text"]))
            elif kind == "image_url" and m.get("role") == "user":
                iu = p.get("image_url")
                url = iu.get("url") if isinstance(iu, dict) else iu
                parts.append(image_part(url, f"messages[{i}].content[{j}].image_url.url"))
            else:
                where = " in a user message" if kind == "image_url" else ""
                raise bad(f"messages[{i}].content", f"messages[{i}].content: only text and image_url parts "
                                                    f"are supported{where}, got {short(kind)}")
        return tuple(parts)
    raise bad(f"messages[{i}].content", f"messages[{i}].content must be text or a list of content parts")


def _messages(body: dict) -> list[Message]:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad("messages", "messages must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}]", f"messages[{i}] must be an object with a role and a content")
        given = m.get("role")
        role = CHAT_ROLES.get(given) if isinstance(given, str) else None
        if role is None:
            raise bad(f"messages[{i}].role", f"messages[{i}].role must be one of {', '.join(CHAT_ROLES)}, "
                                             f"got {short(given)}")
        calls = _tool_calls(m, i, role)
        call_id = m.get("tool_call_id")
        if role == "tool" and not isinstance(call_id, str):
            raise bad(f"messages[{i}].tool_call_id", f"messages[{i}]: a tool message needs the tool_call_id "
                                                     "of the call it answers")
        out.append(Message(role, "", _content(m, i), reasoning=_reasoning(m, i, role), tool_calls=calls,
                           tool_call_id=call_id if role == "tool" else None))
    return out


def _reasoning(m: dict, i: int, role: str) -> str | None:
    """An earlier reply's reasoning, under any of the names clients send it back under
    (the first set, in transformers' order); the template decides whether to keep it."""
    for key in REASONING_FIELDS:
        v = m.get(key)
        if v is None:
            continue
        if not isinstance(v, str):
            raise bad(f"messages[{i}].{key}", f"messages[{i}].{key} must be text, got {type(v).__name__}")
        if role != "assistant":
            raise bad(f"messages[{i}].{key}", f"messages[{i}].{key}: only an assistant message carries "
                                              f"reasoning, not a {m.get('role')} message")
        return v
    return None


def raw_grammar_scope(body: dict) -> str:
    """What a request's grammar shapes: the whole reply for llama-server's own ``grammar`` field, the
    answer after any reasoning for a response format (engine.types.GRAMMAR_SCOPES)."""
    return "reply" if body.get("grammar") is not None else "answer"


def grammar_of(body: dict) -> str | None:
    """GBNF text from ``response_format``, or from ``grammar`` (llama-server's field: the text as is)."""
    rf, gbnf = body.get("response_format"), body.get("grammar")
    if gbnf is not None:
        if not isinstance(gbnf, str) or not gbnf.strip():
            raise bad("grammar", "grammar must be GBNF text (a root rule and the rules it uses)")
        if rf is not None and not (isinstance(rf, dict) and rf.get("type") == "text"):
            raise bad("grammar", "give grammar or response_format, not both")
        return gbnf
    if rf is None:
        return None
    if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
        raise bad("response_format", "response_format.type must be text, json_object or json_schema")
    from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

    if rf["type"] == "text":
        return None
    if rf["type"] == "json_object":
        return JSON_GBNF
    spec = rf.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise bad("response_format.json_schema", "response_format.json_schema.schema must be a JSON Schema "
                                                 "object", code="invalid_schema")
    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except Exception as e:  # the converter raises assertion, key and type errors on schemas it cannot read
        raise bad("response_format.json_schema", f"the JSON schema cannot be turned into a grammar: "
                                                 f"{type(e).__name__}: {e}", code="invalid_schema") from None


def _template_kwargs(body: dict, kind: str) -> dict[str, Any] | None:
    """The chat template's extra variables: ``chat_template_kwargs`` and ``reasoning_effort``."""
    try:
        kw = chat_template_kwargs(body.get("chat_template_kwargs"))
        effort = reasoning_effort(body.get("reasoning_effort"))
    except TemplateVarsError as e:
        raise bad(e.param, str(e)) from None
    if kind != "chat":
        for key, v in (("chat_template_kwargs", kw), ("reasoning_effort", effort)):
            if v is not None:
                raise bad(key, f"{key} applies to /v1/chat/completions only: a completion's prompt "
                               "goes through no chat template")
        return None
    if effort is not None:
        kw = kw or {}
        given = kw.get("reasoning_effort", effort)
        if given != effort:
            raise bad("reasoning_effort", f"reasoning_effort is {effort!r} but chat_template_kwargs "
                                          f"says {given!r}; give it once")
        kw["reasoning_effort"] = effort
    return kw


def _refuse_unsupported(body: dict) -> None:
    if body.get("n") not in (None, 1):
        raise bad("n", "n must be 1: this server writes one choice per request")
    if body.get("best_of") not in (None, 1):
        raise bad("best_of", "best_of must be 1")
    if body.get("logprobs") not in (None, False) or body.get("top_logprobs") is not None:
        raise bad("logprobs", "logprobs are not supported by this server")
    if body.get("echo"):
        raise bad("echo", "echo is not supported by this server")
    if body.get("suffix"):
        raise bad("suffix", "suffix (fill-in-the-middle) is not supported by this server")
    if body.get("functions"):
        raise bad("functions", "functions (function calling) are not supported by this server")
    if body.get("logit_bias"):
        raise bad("logit_bias", "logit_bias is not supported by this server")


def head(body: Any) -> tuple[dict, str]:
    """Every format's first checks: the body is an object naming its model."""
    if not isinstance(body, dict):
        raise bad("", "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model", "model is required: GET /v1/models lists the one this server runs")
    return body, model


def parse_openai(body: Any, kind: str) -> ApiRequest:
    """Check a request body for /v1/chat/completions (``kind="chat"``) or /v1/completions."""
    body, model = head(body)
    _refuse_unsupported(body)
    req = ApiRequest(kind=kind, model=model)
    if kind == "chat":
        req.messages = _messages(body)
    else:
        p = body.get("prompt")
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
            p = p[0]
        if not isinstance(p, str):
            raise bad("prompt", "prompt must be a string (one prompt per request)")
        req.prompt = p
    mt = body.get("max_completion_tokens", body.get("max_tokens"))
    if mt is not None:
        if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
            raise bad("max_tokens", f"max_tokens must be a whole number of at least 1, got {short(mt)}")
        req.max_tokens = mt
    s: dict[str, Any] = {}
    for key, lo, hi, integer in (("temperature", 0, 2, False), ("top_p", 0, 1, False), ("top_k", 0, 1 << 20, True),
                                 ("min_p", 0, 1, False), ("presence_penalty", -2, 2, False),
                                 ("frequency_penalty", -2, 2, False), ("repeat_penalty", 0, 10, False),
                                 ("seed", -(1 << 63), (1 << 64) - 1, True)):
        v = number(body, key, lo, hi, integer=integer)
        if v is not None:
            s[key] = v
    if s.get("top_p") == 0:
        raise bad("top_p", "top_p must be above 0")
    if s.get("min_p") == 1:
        raise bad("min_p", "min_p must be below 1")
    if s.get("repeat_penalty") == 0:
        raise bad("repeat_penalty", "repeat_penalty must be above 0")
    if "seed" in s:
        s["seed"] = s["seed"] % (1 << 32)  # the engine's generator takes 32 bits; any int from a client maps in
    s["stop"] = _stop(body)
    ignore_eos = body.get("ignore_eos")
    if ignore_eos is not None:  # llama-server's and vLLM's field: decode on past the reply's end, to max_tokens
        if not isinstance(ignore_eos, bool):
            raise bad("ignore_eos", f"ignore_eos must be true or false, got {short(ignore_eos)}")
        s["ignore_eos"] = ignore_eos
    req.sampling = s
    req.grammar = grammar_of(body)
    req.grammar_scope = raw_grammar_scope(body)
    req.template_kwargs = _template_kwargs(body, kind)
    if kind == "chat":
        req.tools, req.tool_choice, req.parallel_tool_calls = parse_openai_tools(body)
        if req.tools and req.grammar is not None:
            raise bad("tools", "give tools or a grammar (response_format), not both: the tools' own "
                               "grammar shapes every call")
    elif body.get("tools"):
        raise bad("tools", "tools apply to /v1/chat/completions only")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream", "stream must be true or false")
    req.stream = stream
    so = body.get("stream_options")
    if so is not None:
        if not stream:
            raise bad("stream_options", "stream_options is only allowed with stream: true")
        if not isinstance(so, dict):
            raise bad("stream_options", "stream_options must be an object")
        req.include_usage = bool(so.get("include_usage"))
    return req


# -- replies -------------------------------------------------------------------


def new_id(kind: str) -> str:
    return f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:24]}"


def openai_usage(prompt_tokens: int, cached_tokens: int, completion_tokens: int,
          reasoning_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage object; ``reasoning_tokens`` are part of ``completion_tokens``."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}}


def finish_reason(engine_reason: str | None) -> str:
    """The reply's ``finish_reason`` on the wire (engine.metrics.FINISH_REASONS)."""
    return openai_finish_reason(engine_reason)


class Shaper:
    """Builds the reply objects of one request (one id and one timestamp for all its chunks)."""

    def __init__(self, kind: str, model: str) -> None:
        self.kind, self.model = kind, model
        self.id = new_id(kind)
        self.created = int(time.time())

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": "hearth"}

    def whole(self, text: str, reason: str | None, use: dict[str, Any],
              reasoning: str | None = None, tool_calls: tuple[ToolCall, ...] = ()) -> dict[str, Any]:
        """The non-streamed reply; a chat reply's ``reasoning`` goes in ``message.reasoning_content``
        (left out when there was none, as llama-server does)."""
        fr = finish_reason(reason)
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text or (None if tool_calls else "")}
            if reasoning:
                message["reasoning_content"] = reasoning
            if tool_calls:
                message["tool_calls"] = [wire_call(c) for c in tool_calls]
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": fr}
            return {**self._head("chat.completion"), "choices": [choice], "usage": use}
        return {**self._head("text_completion"), "usage": use,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": fr}]}

    def chunk(self, text: str | None, reason: str | None = None, *, first: bool = False,
              include_usage: bool = False, reasoning: str | None = None,
              tool_call: Any = None) -> dict[str, Any]:
        """One streamed chunk: a text delta, a reasoning delta (``delta.reasoning_content``), or
        (``reason`` set) the last one of the choice."""
        fr = finish_reason(reason) if reason is not None else None
        if self.kind == "chat":
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if reasoning:
                delta["reasoning_content"] = reasoning
            if text:
                delta["content"] = text
            if tool_call is not None:  # a ToolCallDelta: the whole call, in OpenAI's delta shape
                delta["tool_calls"] = [{"index": tool_call.index, "id": tool_call.id, "type": "function",
                                        "function": {"name": tool_call.name,
                                                     "arguments": tool_call.arguments}}]
            out = {**self._head("chat.completion.chunk"),
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": fr}]}
        else:
            out = {**self._head("text_completion"),
                   "choices": [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": fr}]}
        if include_usage:
            out["usage"] = None  # OpenAI's shape: every chunk but the last carries a null usage
        return out

    def usage_chunk(self, use: dict[str, Any]) -> dict[str, Any]:
        """The extra last chunk of ``stream_options.include_usage``: no choices, the usage."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._head(obj), "choices": [], "usage": use}

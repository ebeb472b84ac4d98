"""How a remote engine counts a prompt's tokens: with its server's own template and tokenizer where the
server offers a way, else an estimate that says it is one.

The server holds the tokenizer, so an exact count is one more request. :func:`probe_count` finds once,
when the engine opens, what the server can do:

- **Hearth** (its models are ``owned_by: hearth``): ``POST /v1/messages/count_tokens``, Anthropic's
  route, counted with the served model's template as a reply's prompt is. Other servers answer that
  route too, some with a guess (words times 1.3), so only Hearth's is taken as exact.
- **llama-server**: ``POST /apply-template`` (its chat template, the generation prompt added), then
  ``POST /tokenize`` of that text with the special tokens parsed and the BOS added where the model
  adds one, as its chat route tokenizes a prompt. Both sit at the server's root, beside ``/v1``.
- **anything else**: about 4 characters a token; ``exact`` is False and the window says so.
"""
from __future__ import annotations

import base64
import threading
from dataclasses import replace
from typing import Any, Mapping, Protocol, Sequence

from ..errors import HearthError
from ..prompt.messages import ImagePart, Message, TextPart
from .client import Client, RemoteModel
from .errors import RemoteError
from .request_body import wire_message

CHARS_PER_TOKEN = 4   # the estimate where the server keeps the tokenizer
PROBE = (Message("user", "Hi"),)
PROBE_TIMEOUT_S = 10.0  # a server that sits on a route it does not know is not waited on for a reply's time

Messages = Sequence[Message | Mapping[str, Any]]


class PromptCounter(Protocol):
    """One way of counting a prompt's tokens; ``exact``: with the server's own tokenizer."""
    exact: bool

    def count(self, messages: Messages, template_kwargs: Mapping[str, object] | None = None,
              cancel: threading.Event | None = None) -> int: ...


def _messages(messages: Messages) -> list[Message]:
    return [m if isinstance(m, Message) else Message.from_dict(m) for m in messages]


class EstimatedCount:
    """About 4 characters a token, and 16 characters for each message's markup."""
    exact = False

    def count(self, messages: Messages, template_kwargs: Mapping[str, object] | None = None,
              cancel: threading.Event | None = None) -> int:
        text = sum(len(m.content) + 16 for m in _messages(messages))
        return -(-text // CHARS_PER_TOKEN)


def _count_of(data: Any, key: str, where: str) -> Any:
    v = data.get(key) if isinstance(data, dict) else None
    if v is None:
        raise RemoteError(f"{where} answered a count without {key!r}", "malformed")
    return v


class HearthCount:
    """A Hearth server's ``/v1/messages/count_tokens``, the messages in Anthropic's shape (:func:`anthropic_body`)
    and the template's variables (the Think choice) as ``chat_template_kwargs``."""
    exact = True

    def __init__(self, client: Client, model: str) -> None:
        self.client, self.model = client, model

    def count(self, messages: Messages, template_kwargs: Mapping[str, object] | None = None,
              cancel: threading.Event | None = None) -> int:
        body = anthropic_body(self.model, _messages(messages))
        if template_kwargs:
            body["chat_template_kwargs"] = dict(template_kwargs)
        data = self.client.json("POST", "/messages/count_tokens", body, cancel=cancel,
                                what="token count (/messages/count_tokens)")
        n = _count_of(data, "input_tokens", self.client.endpoint.address)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise RemoteError(f"{self.client.endpoint.address} counted {n!r} tokens", "malformed")
        return n


class LlamaServerCount:
    """llama-server's ``/apply-template`` and ``/tokenize``; ``client``: one at the server's root."""
    exact = True

    def __init__(self, client: Client) -> None:
        self.client = client

    def count(self, messages: Messages, template_kwargs: Mapping[str, object] | None = None,
              cancel: threading.Event | None = None) -> int:
        body: dict[str, Any] = {"messages": [wire_message(m) for m in _messages(messages)]}
        if template_kwargs:
            body["chat_template_kwargs"] = dict(template_kwargs)
        where = self.client.endpoint.address
        prompt = _count_of(self.client.json("POST", "/apply-template", body, cancel=cancel,
                                            what="chat template route (/apply-template)"), "prompt", where)
        if not isinstance(prompt, str):
            raise RemoteError(f"{where}'s /apply-template gave no prompt text", "malformed")
        # As its chat route tokenizes a prompt: the template's special tokens read as such, the BOS where
        # the model adds one.
        tokens = _count_of(self.client.json("POST", "/tokenize", {"content": prompt, "add_special": True,
                                                                  "parse_special": True},
                                            cancel=cancel, what="tokenizer route (/tokenize)"), "tokens", where)
        if not isinstance(tokens, list):
            raise RemoteError(f"{where}'s /tokenize gave no token list", "malformed")
        return len(tokens)


def root_client(client: Client) -> Client:
    """``client`` at the server's root: llama-server's own routes sit beside ``/v1``, not under it."""
    prefix = client.endpoint.prefix
    root = prefix[:-len("/v1")] if prefix.endswith("/v1") else prefix
    return replace(client, endpoint=replace(client.endpoint, prefix=root))


def probe_count(client: Client, model: RemoteModel, cancel: threading.Event | None = None) -> PromptCounter:
    """The exact way ``client``'s server offers to count ``model``'s prompts, else :class:`EstimatedCount`.
    A Hearth (its models are ``owned_by: hearth``) is known by its model list; llama-server's routes are
    tried on a one-message prompt, with a short wait: a server without them (a 404, or an answer in another
    shape) gets the estimate. Only Stop is raised."""
    if model.owned_by == "hearth":
        return HearthCount(client, model.id)  # every Hearth that lists its models so answers the count
    quick = replace(client, idle_timeout=min(client.idle_timeout, PROBE_TIMEOUT_S))
    try:
        if LlamaServerCount(root_client(quick)).count(PROBE, cancel=cancel) > 0:
            return LlamaServerCount(root_client(client))
    except RemoteError as e:
        if e.kind == "cancelled":
            raise
    return EstimatedCount()


def anthropic_body(model: str, messages: list[Message]) -> dict[str, Any]:
    """``messages`` as a Messages request that Hearth's server reads back into the same messages (its
    anthropic_blocks.py): the first system message as ``system``, a tool result as a ``tool_result`` block
    of the user turn after it, an assistant's reasoning and calls as ``thinking`` and ``tool_use`` blocks."""
    system = None
    if messages and messages[0].role == "system":
        system, messages = messages[0].content, messages[1:]
    turns: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            results.append({"type": "tool_result", "tool_use_id": m.tool_call_id or "call", "content": m.content})
        elif m.role == "user":
            turns.append({"role": "user", "content": results + _user_blocks(m)})
            results = []
        else:
            if results:
                turns.append({"role": "user", "content": results})
                results = []
            turns.append({"role": m.role, "content": _assistant_blocks(m) if m.role == "assistant" else m.content})
    if results:
        turns.append({"role": "user", "content": results})
    body: dict[str, Any] = {"model": model, "messages": turns}
    if system:
        body["system"] = system
    return body


def _user_blocks(m: Message) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in m.parts:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            if p.data is None:
                raise HearthError("an image's bytes are not at hand, so the server cannot count its tokens")
            out.append({"type": "image", "source": {"type": "base64", "media_type": p.mime,
                                                    "data": base64.b64encode(p.data).decode()}})
        else:
            raise HearthError(f"the document {p.name!r} must be sent as its text")  # as the reply's request says
    return out or [{"type": "text", "text": ""}]


def _assistant_blocks(m: Message) -> list[dict[str, Any]] | str:
    out: list[dict[str, Any]] = []
    if m.reasoning:
        out.append({"type": "thinking", "thinking": m.reasoning, "signature": ""})
    if m.content:
        out.append({"type": "text", "text": m.content})
    for c in m.tool_calls:
        args = c.arguments_value()
        out.append({"type": "tool_use", "id": c.id, "name": c.name, "input": args if isinstance(args, dict) else {}})
    return out or ""

"""A model served elsewhere, as an implementation of the engine interface.

The window's engine thread and ``engine chat --remote`` use it exactly as the
local engine: messages and options in, typed events out. What this side cannot
know it says: token counts are the server's own where it can count them
(token_count.py) and estimates, said so in ``Capabilities.exact_tokens``, where it
cannot; a Think control is offered where the server describes the model's (a
Hearth's model list); the figures are measured here (TTFT and tok/s as the user
sees them, the network included), with the server's own counts (``usage``, cached
prompt tokens, llama-server's ``timings``) where it sends them.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterator, Mapping, Sequence

from ..core.job import Priority
from ..decode.metrics import SERVER_BACKEND, GenerationStats
from ..errors import HearthError
from ..interface import Capabilities, ModelInfo
from ..kv.reuse import ProgressFn
from ..prompt.messages import Message, ToolCall, ToolCallDelta
from ..reply_formats import ThinkControl
from ..reply_formats.tools import Tool, ToolPlan
from ..reply_formats.tool_syntax import ToolSyntax
from ..types import SamplingParams, StreamEvent
from .client import Client, RemoteModel
from .request_body import sampling_fields, wire_message
from .think import ThinkSplitter
from .token_count import EstimatedCount, PromptCounter, probe_count
from .errors import RemoteError, Stopped

DEFAULT_N_CTX = 8192  # a server that does not say its context: what most serve at least

# The server's finish_reason as the engine's (engine/decode/metrics.py FINISH_REASONS).
FINISH = {"stop": "eos", "eos": "eos", "length": "max_tokens", "tool_calls": "tool_calls",
          "function_call": "tool_calls", "cancelled": "cancelled", "content_filter": "stop_string"}

# The syntax a remote model's calls come in: OpenAI's tool_calls, parsed by the server.
OPENAI_TOOLS = ToolSyntax(name="openai (the server parses the calls)", open="")


class RemoteEngine:
    """A model on an OpenAI-compatible server (another Hearth, llama-server, vLLM, SGLang, LM Studio,
    Ollama's /v1): opened with :meth:`open`, which lists the server's models and checks the one asked
    for, so a wrong address, key or model fails at once with the reason in one line."""

    def __init__(self, client: Client, model: RemoteModel, *, label: str | None = None,
                 notes: Sequence[str] = (), counter: PromptCounter | None = None,
                 think: ThinkControl | None = None) -> None:
        self.client = client
        self.model = model
        self.label = label or model.id
        self._notes = tuple(notes)
        self.counter: PromptCounter = counter or EstimatedCount()
        self._think = think
        self._n_ctx = model.n_ctx or DEFAULT_N_CTX
        self._closed = False
        self.extras = client.endpoint.host != "api.openai.com"

    @classmethod
    def open(cls, client: Client, model: str | None = None, *, cancel: threading.Event | None = None) -> RemoteEngine:
        """Connect, list the models and pick ``model`` (None: the first the server lists)."""
        models = client.models(cancel=cancel)
        if not models:
            raise RemoteError(f"{client.endpoint.address} lists no models", "not_found")
        if model is None:
            chosen = models[0]
        else:
            chosen = next((m for m in models if m.id == model), None)  # type: ignore[assignment]
            if chosen is None:
                names = ", ".join(m.id for m in models[:8])
                raise RemoteError(f"{client.endpoint.address} does not serve {model!r}; it serves {names}",
                                  "not_found")
        notes = [] if chosen.n_ctx else [f"the server does not say its context length; {DEFAULT_N_CTX:,} tokens "
                                         "is assumed"]
        # Where the server cannot count, the window's context meter says so (Capabilities.exact_tokens).
        return cls(client, chosen, notes=notes, counter=probe_count(client, chosen, cancel), think=chosen.think)

    # -- what it is ---------------------------------------------------------------------

    def describe(self) -> ModelInfo:
        """The model as its server lists it; its Think control where the server describes one (a Hearth's model
        list; elsewhere the server's template decides, and a split reasoning_content is still shown). Nothing
        of a backend's own: those figures are its server's (``local`` is None)."""
        ep = self.client.endpoint
        return ModelInfo(
            label=self.label, path=f"{ep.url}#{self.model.id}", bundled=False, backend="remote", quant="",
            n_ctx=self._n_ctx, runtime=f"remote ({self.model.owned_by or 'OpenAI-compatible'})",
            device=ep.address, think=self._think, capabilities=self.capabilities(), notes=self._notes)

    def capabilities(self) -> Capabilities:
        """Counts are exact where the server counts them (token_count.py), images are sent and its server
        decides whether the model reads them (and counts them), a Think control where the server describes
        one; batching, the queue and the settings are the server's. Tools are sent as OpenAI's, for the
        server to parse; a raw-text continuation goes through the chat API (interface.continue_text)."""
        return Capabilities(exact_tokens=self.counter.exact, images=True, think=self._think is not None,
                            batching=False, tunable=False, runs="server", tools=True)

    def plan_tools(self, tools: Sequence[Tool], choice: str = "auto", parallel: bool = True) -> ToolPlan:
        return ToolPlan(OPENAI_TOOLS, tuple(tools), choice, parallel)

    def count_tokens(self, messages: Sequence[Message | Mapping[str, Any]],
                     template_kwargs: Mapping[str, object] | None = None) -> int:
        """The server's own count where it offers one (``capabilities().exact_tokens``), else an estimate
        (about 4 characters a token)."""
        return self.counter.count(messages, template_kwargs)

    def close(self) -> None:
        self._closed = True  # nothing is held between requests: each reply is one connection

    # -- replies --------------------------------------------------------------------------

    def payload(self, messages: Sequence[Message | Mapping[str, Any]], params: SamplingParams,
                tools: ToolPlan | None) -> tuple[dict[str, Any], list[str]]:
        """The request body for a reply, and the notes on what was not sent."""
        # A Hearth closes the model's reasoning at the budget as the window does here (its models are owned_by hearth).
        fields, notes = sampling_fields(params, self.extras, budget=self.model.owned_by == "hearth")
        body: dict[str, Any] = {"model": self.model.id, "messages": [wire_message(m) for m in messages],
                                "stream_options": {"include_usage": True}, **fields}
        if tools is not None:
            body["tools"] = [t.as_dict() for t in tools.tools]
            choice = tools.choice
            if choice == "required" and len(tools.tools) == 1:
                choice = tools.tools[0].name  # the same demand, in the form every server takes (llama-cpp-python's
                #                               server has no "required")
            body["tool_choice"] = choice if choice in ("auto", "required", "none") else {
                "type": "function", "function": {"name": choice}}
            body["parallel_tool_calls"] = tools.parallel
        return body, notes

    def stream(self, messages: Sequence[Message | Mapping[str, Any]], params: SamplingParams | None = None, *,
               cancel: threading.Event | None = None, progress: ProgressFn | None = None,
               context_policy: str = "drop_oldest", template_kwargs: Mapping[str, object] | None = None,
               tools: ToolPlan | None = None, priority: int = 0, max_wait_s: float | None = None,
               label: str = "") -> Iterator[StreamEvent]:
        if self._closed:
            raise HearthError("the remote model was closed")
        params = params or SamplingParams()
        body, notes = self.payload(messages, params, tools)
        if template_kwargs and self.extras:
            body["chat_template_kwargs"] = dict(template_kwargs)  # the Think choice, as Hearth and llama-server take it
        if priority >= Priority.BACKGROUND and self.model.owned_by == "hearth":
            # Work nobody waits on (a title, a batch job) queues behind the people a Hearth serves. Only lowered,
            # never raised past the key's default; other servers reject the field or ignore it.
            body["priority"] = "background"
        yield from RemoteReply(self, body, notes, cancel).events()


class RemoteReply:
    """One streamed reply: the server's chunks as the engine's events, timed on this side."""

    def __init__(self, engine: RemoteEngine, body: dict[str, Any], notes: list[str],
                 cancel: threading.Event | None) -> None:
        self.engine, self.body, self.cancel = engine, body, cancel
        self.stats = GenerationStats(backend=SERVER_BACKEND, n_ctx=engine._n_ctx, notes=list(notes))
        self.answer: list[str] = []
        self.thought: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish: str | None = None
        self.split = ThinkSplitter()
        self.t0 = time.perf_counter()
        self.t_first_text: float | None = None
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.usage_tokens: int | None = None

    def events(self) -> Iterator[StreamEvent]:
        where = self.engine.client.endpoint.address
        try:
            for chunk in self.engine.client.stream_chat(self.body, cancel=self.cancel):
                yield from self._chunk(chunk)
        except Stopped:
            self.finish = "cancelled"
        except RemoteError as e:
            if e.kind == "lost" and self.finish is not None:
                pass  # the reply was whole; the server only closed without [DONE]
            elif self.answer or self.thought or self.calls:
                raise RemoteError(f"{e} (the partial reply is kept)", e.kind, status=e.status,
                                  retry_after=e.retry_after) from None
            else:
                raise
        if self.cancel is not None and self.cancel.is_set():
            self.finish = "cancelled"
        yield from self._flush_split()
        yield self._final(where)

    def _chunk(self, chunk: dict[str, Any]) -> Iterator[StreamEvent]:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage(usage)
        timings = chunk.get("timings")
        if isinstance(timings, dict):
            self._timings(timings)
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return
        choice = choices[0]
        if not isinstance(choice, dict):
            raise RemoteError(f"{self.engine.client.endpoint.address} sent a choice that is not an object", "malformed")
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise RemoteError(f"{self.engine.client.endpoint.address} sent a delta that is not an object", "malformed")
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            yield self._text("reasoning", reasoning)
        content = delta.get("content")
        if isinstance(content, str) and content:
            for kind, text in self.split.feed(content):
                yield self._text(kind, text)
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                yield self._call(call)
        if choice.get("finish_reason"):
            self.finish = FINISH.get(str(choice["finish_reason"]), "eos")

    def _tick(self) -> float:
        now = time.perf_counter()
        if self.t_first is None:
            self.t_first = now
        self.t_last = now
        s = self.stats
        s.generated_tokens += 1  # a streamed chunk is a token on llama.cpp, vLLM, SGLang and Hearth
        s.decode_ms = (now - self.t_first) * 1e3
        return now

    def _text(self, kind: str, text: str) -> StreamEvent:
        now = self._tick()
        if self.t_first_text is None:
            self.t_first_text = now
            self.stats.ttft_ms = (now - self.t0) * 1e3
        (self.answer if kind == "delta" else self.thought).append(text)
        if kind == "reasoning":
            self.stats.reasoning_tokens += 1
        return StreamEvent("delta" if kind == "delta" else "reasoning", text, stats=self.stats)

    def _call(self, call: dict[str, Any]) -> StreamEvent:
        self._tick()
        index = call.get("index", len(self.calls))
        index = index if isinstance(index, int) and not isinstance(index, bool) else len(self.calls)
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        slot = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        cid, name, args = call.get("id"), fn.get("name"), fn.get("arguments")
        if isinstance(cid, str) and cid:
            slot["id"] = cid
        if isinstance(name, str) and name and not slot["name"]:
            slot["name"] = name
        if isinstance(args, str):
            slot["arguments"] += args
        elif isinstance(args, dict):  # some servers send the arguments as an object
            slot["arguments"] += json.dumps(args, ensure_ascii=False)
        return StreamEvent("tool_call", tool_call=ToolCallDelta(index, cid if isinstance(cid, str) else None,
                                                                name if isinstance(name, str) else None,
                                                                args if isinstance(args, str) else ""))

    def _flush_split(self) -> Iterator[StreamEvent]:
        for kind, text in self.split.close():
            yield self._text(kind, text)

    def _usage(self, usage: dict[str, Any]) -> None:
        s = self.stats
        if isinstance(usage.get("prompt_tokens"), int):
            s.prompt_tokens = usage["prompt_tokens"]
        if isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            s.cached_tokens = details["cached_tokens"]
        s.prefill_tokens = max(0, s.prompt_tokens - s.cached_tokens)

    def _timings(self, t: dict[str, Any]) -> None:
        s = self.stats
        if isinstance(t.get("cache_n"), int):
            s.cached_tokens = t["cache_n"]
        if isinstance(t.get("prompt_n"), int):
            s.prefill_tokens = t["prompt_n"]
            s.prompt_tokens = max(s.prompt_tokens, t["prompt_n"] + s.cached_tokens)
        if isinstance(t.get("prompt_ms"), (int, float)):
            s.prefill_ms = float(t["prompt_ms"])

    def _final(self, where: str) -> StreamEvent:
        s = self.stats
        calls = tuple(ToolCall(c["id"] or f"call_{i}", c["name"], c["arguments"] or "{}")
                      for i, c in sorted(self.calls.items()) if c["name"])
        finish = self.finish or ("tool_calls" if calls else "eos")
        if calls and finish == "eos":
            finish = "tool_calls"
        if self.usage_tokens is not None:
            s.generated_tokens = self.usage_tokens  # the server's count, exact
        elif finish != "cancelled":
            s.notes.append(f"{where} reported no token usage: the reply's tokens were counted as they arrived "
                           "and the prompt's are unknown")
        s.answer_tokens = max(0, s.generated_tokens - s.reasoning_tokens)
        s.finish_reason = finish
        s.finish(t_start=self.t0, t_first_text=self.t_first_text, t_first_token=self.t_first,
                 t_last_token=self.t_last, t_end=time.perf_counter())
        if finish == "cancelled":
            s.notes.append(f"stopped: the connection to {where} was closed")
        answer = "".join(self.answer)
        reasoning = "".join(self.thought) if self.thought else None
        # A reply cut inside its reasoning (a server that splits it sends no close): reasoning and no answer.
        cut = finish in ("max_tokens", "cancelled") and reasoning is not None and not answer and not calls
        return StreamEvent("final", answer, finish_reason=finish, stats=s, reasoning=reasoning,
                           reasoning_open=cut or (self.split.inside and not answer), tool_calls=calls)

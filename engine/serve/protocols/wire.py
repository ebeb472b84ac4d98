"""What a wire format gives the shared route: how to read a request, how to shape its reply.

Every generating endpoint (OpenAI's chat and completions, Anthropic's messages,
OpenAI's responses) runs the same route in server.py: read the body, check it
into an :class:`ApiRequest`, submit it to the scheduler, wait for the first
event, then answer whole or streamed. Only the shapes differ, and they live
behind :class:`Reply`: one object per request, fed the engine's events in
order, returning the JSON of a whole reply or the SSE items of a stream (an
item is a dict for sse-starlette: ``data``, and ``event`` where the format
names its events).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from ...decode.metrics import GenerationStats
from ...types import StreamEvent
from . import anthropic, responses
from .openai import ApiError, ApiRequest, Shaper, openai_usage, parse_openai
from .scheduling import with_scheduling

SSE = dict[str, str]


class Reply(Protocol):
    """One request's reply, in one wire format."""

    def whole(self, final: StreamEvent) -> dict[str, Any]:
        """The non-streamed reply, from the final event (the whole text, reasoning and stats)."""
        ...

    def opening(self) -> list[SSE]:
        """What a stream sends before the first event."""
        ...

    def event(self, ev: StreamEvent) -> list[SSE]:
        """A delta or reasoning event, as the stream sends it."""
        ...

    def closing(self, final: StreamEvent) -> list[SSE]:
        """The stream's end, from the final event."""
        ...

    def failure(self, e: ApiError) -> list[SSE]:
        """An error after the stream's headers went out."""
        ...


@dataclass(frozen=True, slots=True)
class Wire:
    """A generating endpoint: its body checker and its reply maker
    (``reply(request, model_id, first_event)``)."""
    parse: Callable[[Any], ApiRequest]
    reply: Callable[[ApiRequest, str, StreamEvent], Reply]


def _usage(st: GenerationStats) -> dict[str, Any]:
    """A reply's stats as OpenAI's usage object."""
    return openai_usage(st.prompt_tokens, st.cached_tokens, st.generated_tokens, st.reasoning_tokens)


def timings(st: GenerationStats) -> dict[str, Any]:
    """llama-server's ``timings`` object: the prompt tokens read from the cache (``cache_n``) and computed
    (``prompt_n``, ``prompt_ms``), the tokens generated (``predicted_n``; ``predicted_ms`` from the first to
    the last), and where the reply speculated, the draft tokens proposed and accepted."""
    out: dict[str, Any] = {
        "cache_n": st.cached_tokens, "prompt_n": st.prefill_tokens, "prompt_ms": round(st.prefill_ms, 3),
        "prompt_per_token_ms": round(st.prefill_ms / st.prefill_tokens, 3) if st.prefill_tokens else 0.0,
        "prompt_per_second": round(st.prefill_tok_s, 3),
        "predicted_n": st.generated_tokens, "predicted_ms": round(st.decode_ms, 3),
        "predicted_per_token_ms": round(st.tpot_ms, 3), "predicted_per_second": round(st.decode_tok_s, 3)}
    drafted = (st.spec or {}).get("drafted", 0)
    if drafted:
        out["draft_n"], out["draft_n_accepted"] = drafted, st.spec["accepted"]  # type: ignore[index]
    return out


class OpenAIReply:
    """Chat completions and completions: Shaper's objects, ``data:`` lines, then ``[DONE]``."""

    def __init__(self, kind: str, model: str, include_usage: bool) -> None:
        self.shaper = Shaper(kind, model)
        self.include_usage = include_usage

    def whole(self, final: StreamEvent) -> dict[str, Any]:
        assert final.stats is not None  # every final event carries its stats
        # A reply cut inside its reasoning (max_tokens) keeps it: finish_reason "length" says so.
        return {**self.shaper.whole(final.text, final.finish_reason, _usage(final.stats),
                                    reasoning=final.reasoning, tool_calls=final.tool_calls),
                "timings": timings(final.stats)}

    def _chunk(self, text: str | None, reason: str | None = None, **kw: Any) -> SSE:
        return {"data": json.dumps(self.shaper.chunk(text, reason, include_usage=self.include_usage, **kw))}

    def opening(self) -> list[SSE]:
        return [self._chunk(None, first=True)]

    def event(self, ev: StreamEvent) -> list[SSE]:
        if ev.text and ev.kind == "delta":
            return [self._chunk(ev.text)]
        if ev.text and ev.kind == "reasoning":
            return [self._chunk(None, reasoning=ev.text)]
        if ev.kind == "tool_call":
            return [self._chunk(None, tool_call=ev.tool_call)]
        return []

    def closing(self, final: StreamEvent) -> list[SSE]:
        assert final.stats is not None  # every final event carries its stats
        out = [self.shaper.chunk(None, final.finish_reason, include_usage=self.include_usage)]
        if self.include_usage:
            out.append(self.shaper.usage_chunk(_usage(final.stats)))
        out[-1]["timings"] = timings(final.stats)  # on the last chunk, as llama-server sends it
        return [{"data": json.dumps(c)} for c in out] + [{"data": "[DONE]"}]

    def failure(self, e: ApiError) -> list[SSE]:
        return [{"data": json.dumps(e.body())}, {"data": "[DONE]"}]


def openai_wire(kind: str) -> Wire:
    """``/v1/chat/completions`` (``kind="chat"``) or ``/v1/completions``."""
    return Wire(lambda body: with_scheduling(parse_openai(body, kind), body),
                lambda req, model, _first: OpenAIReply(kind, model, req.include_usage))


def anthropic_wire() -> Wire:
    """``/v1/messages``: Anthropic's Messages API."""
    return Wire(lambda body: with_scheduling(anthropic.parse_anthropic(body), body, budget=False),
                lambda _req, model, first: anthropic.MessageReply(model, first))


def responses_wire(store: responses.ResponseStore) -> Wire:
    """``/v1/responses``: OpenAI's Responses API; ``store`` keeps what previous_response_id continues."""
    return Wire(lambda body: with_scheduling(responses.parse_responses(body, store), body),
                lambda req, model, _first: responses.ResponseReply(req, model, store))

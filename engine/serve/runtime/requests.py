"""What a caller hands the scheduler, and what it gets back.

A :class:`ServeRequest` is one chat or completion; :meth:`Scheduler.submit`
returns a :class:`Ticket`, whose ``events()`` yields the same
:class:`~engine.types.StreamEvent` shape as ``Engine.stream`` and whose
``times`` say where the request's time went (queue, prefill, decode).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from collections.abc import Generator
from typing import Any, Callable, Iterator

from ...core.job import Priority, QueueTimeout
from ...errors import HearthError
from ...reply_formats.tools import ToolPlan
from ...decode.metrics import openai_finish_reason
from ...prompt.messages import Message
from ...types import SamplingParams, StreamEvent

__all__ = ["CONTEXT_POLICIES", "Priority", "QueueFull", "QueueTimeout", "RequestTimes", "ServeRequest", "Ticket"]

# The API's "error" (a request too long is refused, the protocols' default) is the engine's "stop".
CONTEXT_POLICIES = {"error": "stop", "stop": "stop", "drop_oldest": "drop_oldest", "shift": "shift",
                    "compact": "compact"}


@dataclass
class ServeRequest:
    """One request: ``messages`` (chat, through the model's template) or ``prompt``
    (raw completion text), never both. ``grammar`` is GBNF text that every
    generated token must follow. ``context_policy``: "error" (a prompt longer
    than the context is refused; the API's default) or one of the engine's
    policies (engine/prompt/view.py). ``template_kwargs``: variables for
    the chat template (``chat_template_kwargs``, ``reasoning_effort``). ``priority``: the
    engine core's class (interactive by default; background for work nobody waits on);
    ``max_wait_s``: the longest it may wait for the model before QueueTimeout (HTTP 503);
    ``label``: who asked (a device key's name), for the figures."""
    messages: list[Message] | None = None
    prompt: str | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    grammar: str | None = None
    grammar_scope: str = "answer"  # what ``grammar`` shapes: "answer" (after a reasoning block) or the whole "reply"
    priority: Priority = Priority.API
    context_policy: str = "error"
    template_kwargs: dict[str, Any] | None = None
    tools: ToolPlan | None = None  # chat: the tools offered and how they must be called
    max_wait_s: float | None = None
    label: str = ""

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise HearthError("a request needs exactly one of messages or prompt")
        if self.messages is not None and not self.messages:
            raise HearthError("a chat request needs at least one message")
        if self.context_policy not in CONTEXT_POLICIES:
            raise HearthError(f"unknown context policy {self.context_policy!r}; "
                              f"choose one of {', '.join(CONTEXT_POLICIES)}")
        if not isinstance(self.priority, Priority):
            self.priority = Priority(self.priority)

    @property
    def prompt_kwargs(self) -> dict[str, Any] | None:
        """The chat template's variables, the tools included: what its prompt is rendered with."""
        return self.tools.with_tools(self.template_kwargs) if self.tools is not None else self.template_kwargs


@dataclass
class RequestTimes:
    """Where one request's time went, filled in by the scheduler."""
    queue_wait_s: float = 0.0    # submit -> the scheduler started it
    prefill_s: float = 0.0       # started -> first token
    decode_s: float = 0.0        # first token -> last token
    prompt_tokens: int = 0
    cached_tokens: int = 0       # prompt tokens served from the KV (prefix cache, shared system prompt)
    completion_tokens: int = 0
    finish_reason: str | None = None  # metrics.openai_finish_reason's ("stop" | "length" | "cancelled"), or "error"


class QueueFull(HearthError):
    """Too many API requests are waiting; try again after ``retry_after_s`` (HTTP 429)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Ticket:
    """A submitted request: read its events, or cancel it, from any thread.

    Its events come from the engine's ``stream`` (or ``complete``), run by whoever reads them:
    for the local engine that is a place in the engine core's queue and its reply; for a remote
    one, a request to its server. ``times`` say where the request's time went."""

    def __init__(self, req: ServeRequest, seq: int, events: Callable[["Ticket"], Iterator[StreamEvent]]) -> None:
        self.request = req
        self.seq = seq
        self.times = RequestTimes()
        self.submitted = time.perf_counter()
        self.started: float | None = None  # when the engine began serving it (left the queue)
        self.on_done: Callable[[Ticket], None] | None = None  # counts it as served
        self.cancel_flag = threading.Event()
        self._done = threading.Event()
        self._replied = False  # the final event is out: nothing is left to cancel
        # The engine queues the request now (a local engine prepares it here too); what goes wrong
        # (a prompt too long, a bad grammar) is raised to the reader, from events().
        self._error: HearthError | None = None
        self._events: Iterator[StreamEvent] = iter(())
        try:
            self._events = events(self)
        except HearthError as e:
            self._error = e
        # Queued by the engine as events() returned: the queue wait the engine measures starts there (after
        # the prompt's preparation on this thread), so ``started`` is this plus that wait, on one clock.
        self.queued = time.perf_counter()

    # -- the consumer's side ----------------------------------------------------

    def events(self) -> Iterator[StreamEvent]:
        """Text deltas, then one final event (blocks while waiting). A request
        that fails (e.g. a prompt too long for the context) raises its
        HearthError here instead of the final event. Read once."""
        finished = False
        events = self._events
        try:
            if self._error is not None:
                raise self._error
            for ev in events:
                if self.started is None and ev.stats is not None:
                    self.started = self.queued + ev.stats.queue_wait_ms / 1e3
                if ev.kind == "final":
                    self._record(ev)
                    finished = self._replied = True
                    try:
                        yield ev
                    finally:  # also when the reader closes the events right after this one, never resuming
                        self.finish(openai_finish_reason(ev.finish_reason))
                    return
                yield ev
        except HearthError as e:
            finished = True
            self.finish(None, error=e)
            raise
        except Exception as e:  # a bug must end the request, not the server
            finished = True
            err = HearthError(f"the request failed: {type(e).__name__}: {e}")
            self.finish(None, error=err)
            raise err from e
        finally:
            if isinstance(events, Generator):
                events.close()  # the reader left early (a disconnect): the engine stops the request
            if not finished:
                self.cancel()
                self.finish("cancelled")

    def _record(self, ev: StreamEvent) -> None:
        st, t = ev.stats, self.times
        if st is None:
            return
        t.queue_wait_s = st.queue_wait_ms / 1e3
        # Started -> first token: the prompt's preparation, then reading it.
        t.prefill_s = (st.template_ms + st.tokenize_ms + st.prefill_ms) / 1e3
        t.decode_s = st.decode_ms / 1e3
        t.prompt_tokens, t.cached_tokens = st.prompt_tokens, st.cached_tokens
        t.completion_tokens = st.generated_tokens
        if self.started is None:
            self.started = self.queued + t.queue_wait_s

    def cancel(self) -> None:
        """Stop this request: a queued one never starts, a running one stops within one step. A
        request whose final event is out is left alone."""
        if self._replied:
            return
        self.cancel_flag.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the request has finished (its final event or error was read)."""
        return self._done.wait(timeout)

    def finish(self, reason: str | None, error: BaseException | None = None) -> None:
        """The request is over: ``reason`` in the OpenAI vocabulary, or an error."""
        if self._done.is_set():
            return
        self.times.finish_reason = "error" if error is not None else reason
        self._done.set()
        if self.on_done is not None:
            self.on_done(self)

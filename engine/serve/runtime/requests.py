"""What a caller hands the scheduler, and what it gets back.

A :class:`ServeRequest` is one chat or completion; :meth:`Scheduler.submit`
returns a :class:`Ticket`, whose ``events()`` yields the same
:class:`~engine.types.StreamEvent` shape as ``Engine.stream`` and whose
``times`` say where the request's time went (queue, prefill, decode).
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from enum import IntEnum
from collections.abc import Generator
from typing import Any, Callable, Iterator

from ...errors import HearthError
from ...reply_formats.tools import ToolPlan
from ...prompt.messages import ImagePart
from ...decode.metrics import openai_finish_reason
from ...prompt.messages import Message
from ...types import SamplingParams, StreamEvent

CONTEXT_POLICIES = {"error": "stop", "stop": "stop", "drop_oldest": "drop_oldest"}


class Priority(IntEnum):
    """Lower runs first: the window's own reply before any API request."""
    WINDOW = 0
    API = 1


@dataclass
class ServeRequest:
    """One request: ``messages`` (chat, through the model's template) or ``prompt``
    (raw completion text), never both. ``grammar`` is GBNF text that every
    generated token must follow. ``context_policy``: "error" (a prompt longer
    than the context is refused; the API's choice) or "drop_oldest" (the
    window's: the oldest turns are left out). ``template_kwargs``: variables for
    the chat template (``chat_template_kwargs``, ``reasoning_effort``)."""
    messages: list[Message] | None = None
    prompt: str | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    grammar: str | None = None
    priority: Priority = Priority.API
    context_policy: str = "error"
    template_kwargs: dict[str, Any] | None = None
    tools: ToolPlan | None = None  # chat: the tools offered and how they must be called

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
    def has_images(self) -> bool:
        """Whether a message holds an image: such a request runs through the engine, one at a time
        (the batch context has no projector)."""
        return any(isinstance(p, ImagePart) for m in self.messages or () for p in m.parts)

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


_END = object()


class _Stream:
    """Events to relay from the reader's thread (a batched sequence's stream_tokens)."""

    def __init__(self, events: Iterator[StreamEvent], end_reason: Callable[[], str | None]) -> None:
        self.events = events
        self.end_reason = end_reason


class Ticket:
    """A submitted request: read its events, or cancel it, from any thread."""

    def __init__(self, req: ServeRequest, seq: int) -> None:
        self.request = req
        self.seq = seq
        self.times = RequestTimes()
        self.submitted = time.perf_counter()
        self.started: float | None = None  # when the scheduler began serving it
        self.on_cancel: Callable[[], None] | None = None  # wakes the scheduler
        self.on_done: Callable[[Ticket], None] | None = None  # counts it as served
        self.cancel_flag = threading.Event()
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Event()
        self._replied = False  # the final event is out: nothing is left to cancel

    # -- the consumer's side ----------------------------------------------------

    def events(self) -> Iterator[StreamEvent]:
        """Text deltas, then one final event (blocks while waiting). A request
        that fails (e.g. a prompt too long for the context) raises its
        HearthError here instead of the final event."""
        while True:
            item = self._q.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, _Stream):
                yield from self._relay(item)
                continue
            yield item

    def cancel(self) -> None:
        """Stop this request: a queued one never starts, a running one stops within one step. A
        request whose final event is out is left alone, so the KV its reply left in a batch slot
        stays for the next prompt to share (the server closes every request once it is answered)."""
        if self._replied:
            return
        self.cancel_flag.set()
        if self.on_cancel is not None:
            self.on_cancel()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the request has finished (its final event or error was posted)."""
        return self._done.wait(timeout)

    def _relay(self, stream: _Stream) -> Iterator[StreamEvent]:
        finished = False
        try:
            for ev in stream.events:
                if ev.kind == "final":
                    why = stream.end_reason()  # the decode thread ended it (cancel, slot full)
                    if why is not None:
                        ev.finish_reason = why
                        if ev.stats is not None:
                            ev.stats.finish_reason = why
                    self.times.completion_tokens = len(ev.token_ids)
                    finished = True
                    self._replied = True
                    yield ev
                    self.finish(openai_finish_reason(ev.finish_reason))
                    return
                yield ev
        except HearthError as e:
            finished = True
            self.finish(None, error=e)
            raise
        finally:
            if isinstance(stream.events, Generator):
                stream.events.close()  # the reader left early (a disconnect): the decode thread frees the slot
            if not finished:
                self.cancel()
                self.finish("cancelled")

    # -- the scheduler's side ---------------------------------------------------

    def post_stream(self, events: Iterator[StreamEvent], end_reason: Callable[[], str | None]) -> None:
        """Relay ``events`` (run by the reader); ``end_reason()`` may override the final reason."""
        self._q.put(_Stream(events, end_reason))

    def post(self, event: StreamEvent) -> None:
        self._q.put(event)

    def finish(self, reason: str | None, error: BaseException | None = None) -> None:
        """The last thing posted: ``reason`` in the OpenAI vocabulary, or an error."""
        if self._done.is_set():
            return
        self.times.finish_reason = "error" if error is not None else reason
        if error is not None:
            self._q.put(error)
        self._q.put(_END)
        self._done.set()
        if self.on_done is not None:
            self.on_done(self)

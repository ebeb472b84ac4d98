"""Compaction, run for a request whose conversation outgrew the context under the ``compact`` policy.

First a "context" event with no text (the summary is being written: the window says so), then the
summary of the turns the cut left out, written by the loaded model through the engine core like
any request, with the asker's priority and Stop (engine/prompt/summary.py), then a "context" event
with its text, then the reply's own events, its prompt holding the summary in the turns' place.
The reply's stats name the policy, the messages summarized and what the summary cost.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Protocol, Sequence

from ..decode.metrics import GenerationStats
from ..decode.prepare import Compaction
from ..errors import HearthError
from ..prompt.messages import Message
from ..prompt.summary import summary_message, summary_params, summary_request
from ..types import StreamEvent

if TYPE_CHECKING:
    from ..kv.reuse import ProgressFn
    from ..prompt.summary import Summaries
    from ..reply_formats.tools import ToolPlan
    from ..types import SamplingParams
    from .job import Handle
    from .reply import ReplyRequest


class Compacts(Protocol):
    """What compaction asks of the engine it runs in (engine.Engine is one): the engine module imports
    this one, so this one names the engine's few members it uses rather than the engine."""

    summaries: "Summaries"

    @property
    def n_ctx(self) -> int: ...

    def stream(self, messages: Sequence[Message | Mapping[str, Any]], params: "SamplingParams | None" = None, *,
               cancel: threading.Event | None = None, progress: "ProgressFn | None" = None,
               context_policy: str | None = None, template_kwargs: Mapping[str, object] | None = None,
               tools: "ToolPlan | None" = None, priority: int = ..., max_wait_s: float | None = None,
               label: str = "") -> Iterator[StreamEvent]: ...

    def prepare(self, messages: Sequence[Message | Mapping[str, Any]], params: "SamplingParams", *,
                context_policy: str = ..., template_kwargs: Mapping[str, object] | None = ...,
                tools: "ToolPlan | None" = ..., compaction: Compaction | None = ...) -> "ReplyRequest": ...

    def submit(self, reply: "ReplyRequest", *, priority: int = ..., cancel: threading.Event | None = None,
               max_wait_s: float | None = None, label: str = "") -> "Handle": ...


def compacting(engine: Compacts, reply: "ReplyRequest", messages: Sequence[Message | Mapping[str, Any]],
               tools: "ToolPlan | None", progress: "ProgressFn | None", ask: dict[str, Any]) -> Iterator[StreamEvent]:
    """The events of ``reply`` (prepared under ``compact``, its cut leaving turns out) after its summary."""
    req = reply.req
    cut = req.cut
    assert cut is not None
    yield StreamEvent("context", "")
    t0 = time.perf_counter()
    key = engine.summaries.key(cut, req.template_kwargs)
    text, tokens = engine.summaries.get(key), 0
    if text is None:
        final = None
        for ev in engine.stream(summary_request(cut, engine.n_ctx), summary_params(engine.n_ctx),
                                context_policy="drop_oldest", template_kwargs=req.template_kwargs, **ask):
            final = ev if ev.kind == "final" else final
        if final is None or final.finish_reason == "cancelled":
            yield _cancelled()
            return
        text, tokens = final.text.strip(), final.stats.generated_tokens if final.stats else 0
        if not text:
            raise HearthError("the model wrote an empty summary of the oldest messages; choose another "
                              "context policy (Settings → Sampling) or start a new conversation")
        engine.summaries.put(key, text)
    done = Compaction(text, len(cut.left_out), cut.view_start, (time.perf_counter() - t0) * 1e3, tokens)
    again = engine.prepare(cut.view(summary_message(text)), req.params, context_policy="drop_oldest",
                           template_kwargs=req.template_kwargs, tools=tools, compaction=done)
    again.t_start = reply.t_start  # the reply's time to first token counts the summary: the user waited for it
    handle = engine.submit(again, **ask)
    yield StreamEvent("context", text)
    yield from handle.events(progress)


def _cancelled() -> StreamEvent:
    """Stop came while the summary was written: the reply ends before it began."""
    return StreamEvent("final", "", finish_reason="cancelled", stats=GenerationStats(finish_reason="cancelled"))

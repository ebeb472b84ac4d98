"""One request's pipeline: its prompt's checkpoints, its step generator and its stream stages.

Every request (the window's, an API client's, an agent's, another device's) runs
this one pipeline on the engine core's thread, so every reply gets the same
features: the prefix cache's checkpoints (in memory and on disk), the grammar that
starts after the reasoning, the thinking budget, tool calls drawn again when they
fail their schema, and speculative decoding where the engine speculates. Its
forwards are Computes the core runs in each step's one batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from ..decode.constraint import ConstrainedSampler
from ..decode.generate import Steering, Steps, generate_step, no_steps
from ..decode.metrics import GenerationStats
from ..decode.resample import SequenceRewind
from ..decode.room import keeper_for, prompt_fit
from ..decode.sampling import Sampler
from ..decode.stream import stream_tokens
from ..decode.timeline import Recorder
from ..errors import Cancelled
from ..inputs.media import has_media

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..decode.prepare import Prepared
    from ..speculative.setup import Speculation
    from ..speculative.stats import SpecStats
    from .lease import SeqLease, TrackedView


@dataclass(slots=True)
class ReplyRequest:
    """A prepared request and what its reply is measured by: ``checkpoints`` (prompt lengths to
    snapshot on the way), the timeline recorder, and when the request began (before its template)."""
    req: "Prepared"
    checkpoints: Sequence[int]
    rec: Recorder
    t_start: float


def reply_pipeline(backend: "Backend", speculation: "Speculation", reply: ReplyRequest, lease: "SeqLease") -> Steps:
    """The request's reply: text events, then one final event (engine.types.StreamEvent)."""
    view = lease.view
    req, rec = reply.req, reply.rec
    prompt, params = req.tokens, req.params
    history = list(prompt)
    profile = getattr(backend, "exactness", "")
    stats = GenerationStats(backend=backend.name, profile=profile, n_ctx=view.n_ctx,
                            dropped_messages=req.dropped, queue_wait_ms=lease.queue_wait_s * 1e3)
    prompt_fit(stats, req, lease.reuse.moved[view.seq], fast=profile == "fast")
    # A grammar over the whole reply ("reply" scope) must see every token, so no closing text is
    # forced past it; an answer-scoped one pauses while the reply is inside its reasoning (steer.free).
    constraint = req.constraint(backend)
    whole = constraint is not None and params.grammar_scope == "reply"
    steer = Steering() if req.layout is not None and not whole else None
    base = rec.make_sampler(params)
    sampler = base if constraint is None else \
        ConstrainedSampler(base, constraint, steer, req.closing(backend, view.n_ctx))
    # A tool call that fails its schema is drawn again from its section's start (decode/resample.py).
    rewind = SequenceRewind(view, len(prompt), history, sampler, params, steer) if req.tools is not None else None
    # A reply that fills the context goes on under every policy but "stop" (decode/room.py).
    room = keeper_for(view, req, history, sampler, steer, stats, fast=profile == "fast")
    keep = lease.cached
    try:
        try:
            for cp in reply.checkpoints:
                if cp > view.kv_len:
                    if (yield from lease.reuse.reach(view, prompt[:cp])):
                        keep = cp
        except Cancelled:
            steps, spec = no_steps(), None
        else:
            budgeted = steer is not None and params.reasoning_budget is not None
            steps, spec = _steps(speculation, view, prompt, base, sampler, history, steer, budgeted=budgeted)
        # The reply's clock runs from the request's start with its wait in the queue taken out: the
        # stats add ``queue_wait_ms`` back to TTFT and end-to-end, and reading the prompt starts when
        # the request got its sequence.
        yield from stream_tokens(backend, steps, prompt_len=len(prompt), cached=keep, params=params,
                                 stats=stats, t_start=reply.t_start + lease.queue_wait_s, cancel=lease.cancel,
                                 spec_stats=spec, timeline=rec, t_prefill=lease.admitted, layout=req.layout,
                                 opened=req.opened, steer=steer if spec is None else None, tools=req.tools,
                                 rewind=rewind, kv=view, room=room)
    finally:
        # Whatever happened (stop, cancel, error, a closed pipeline), record what the KV really
        # holds so the next request can reuse it safely.
        lease.commit(history)
        if constraint is not None:
            constraint.close()


def _steps(speculation: "Speculation", view: "TrackedView", prompt: list[int], base: Sampler,
           sampler: Callable[[Sequence[int], np.ndarray], int], history: list[int], steer: Steering | None, *,
           budgeted: bool) -> tuple[Steps, "SpecStats | None"]:
    """The reply's one step generator, chosen once: plain under a grammar (``sampler`` then
    carries it over ``base``) or a thinking budget, else speculative where the engine speculates."""
    pending = prompt[view.kv_len:]
    if sampler is not base:
        return generate_step(pending, sampler, history, steer), None
    chosen = None if budgeted else speculation.steps(view, pending, base, history, sees_images=has_media(prompt))
    if chosen is None:
        return generate_step(pending, sampler, history, steer), None
    return chosen

"""The server's side of its metrics (serve/metrics.py): each request as it ends, the gauges, and ``GET /metrics``.

A request is counted once, when the server lets go of its ticket (answered, failed or
abandoned): from its final event's stats where it reached one, else from the ticket's
own ``times``. The gauges add up every scheduler the server serves: its own model's and
those the pool loaded. The key that let a request in is the one the key check put in
the request's state (security.py), so each device key's use is counted by its name.
"""
from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ...decode.metrics import openai_finish_reason
from ...types import StreamEvent
from ..metrics import FinishedRequest, ServerMetrics
from ..protocols.openai import ApiError
from ..runtime.requests import Priority, Ticket
from ..runtime.targets import Targets
from .security import KEY_STATE

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format


def priority_name(priority: Priority) -> str:
    """The class a request is counted in (serve/metrics.py's PRIORITIES)."""
    return {Priority.WINDOW: "window", Priority.API: "interactive"}.get(priority, priority.name.lower())


def request_key(request: Request) -> tuple[str, str] | None:
    """The (name, id) of the key that let ``request`` in; None when none was needed."""
    return request.scope.get("state", {}).get(KEY_STATE)


def finished_request(ticket: Ticket, final: StreamEvent | None, key: tuple[str, str] | None) -> FinishedRequest:
    """``ticket`` as it ends now: from its final event where it had one (a cut-short reply's
    included), else from what the scheduler wrote in its ``times`` (no token counted as out)."""
    age = time.perf_counter() - ticket.submitted
    submitted = time.time() - age
    prio = priority_name(ticket.request.priority)
    name, kid = key if key is not None else (None, None)
    if final is not None and final.stats is not None:
        return FinishedRequest.from_stats(final.stats, openai_finish_reason(final.finish_reason),
                                          submitted=submitted, priority=prio, key=name, key_id=kid)
    t = ticket.times
    queue = ticket.started - ticket.queued if ticket.started is not None else age  # the engine's wait, as in stats
    # No final event: it failed, or its client left before the end; a reason still unset means
    # the cancel the release just sent has not reached the scheduler yet.
    reason = t.finish_reason if t.finish_reason in ("error", "cancelled") else "cancelled"
    return FinishedRequest(submitted=submitted, queue_s=queue, ttft_s=None, tpot_s=None, e2e_s=age,
                           prompt_tokens=t.prompt_tokens, cached_tokens=t.cached_tokens, finish_reason=reason,
                           priority=prio, key=name, key_id=kid)


def scheduler_gauges(targets: Targets) -> dict[str, float]:
    """Requests running and waiting, and the KV in use, over every scheduler ``targets`` serves."""
    scheds: dict[int, Any] = {}
    try:
        own = targets.own().scheduler
        scheds[id(own)] = own
    except ApiError:  # no model attached right now (loading): only the pool's count
        pass
    if targets.pool is not None:
        for held in targets.pool.held():
            scheds.setdefault(id(held.scheduler), held.scheduler)
    out = {"running": 0.0, "waiting": 0.0, "kv_used_tokens": 0.0, "kv_capacity_tokens": 0.0}
    for s in scheds.values():
        st = s.stats()
        out["running"] += st.get("running", 0)
        out["waiting"] += st.get("queued", 0)
        out["kv_used_tokens"] += st.get("kv_used_tokens", 0)
        out["kv_capacity_tokens"] += st.get("kv_capacity_tokens", 0)
    return out


def metrics_route(metrics: ServerMetrics):
    """The ``GET /metrics`` endpoint over ``metrics`` (behind the same guard as every route)."""
    async def endpoint(request: Request) -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)
    return endpoint

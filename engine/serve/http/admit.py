"""What a parsed API request becomes before it is queued: a ServeRequest for the model it names.

Everything the request can be refused for without generating is checked here, so a
bad request is a plain 400 before any work: the template's variables and thinking
switch, and the tools (a schema the grammar cannot express, a model that takes none).
"""
from __future__ import annotations

from typing import Any

from starlette.requests import Request

from ...errors import HearthError, ToolsUnsupported
from ...interface import plan_tools
from ...reply_formats.tools import ToolError
from ...library.model_settings import Layered
from ..protocols.dialect import anthropic_wire
from ..protocols.openai import ApiError, ApiRequest
from ..protocols.scheduling import API_CLASSES
from ..protocols.template_vars import TemplateVarsError, chat_template_kwargs, check_think
from ..runtime.requests import Priority, ServeRequest
from ..runtime.targets import Lease, Target
from .request_defaults import sampling_for
from .security import KEY_PRIORITY, KEY_STATE


def max_wait(seconds: float | None) -> float | None:
    """A server's longest queue wait as ServeRequest takes it: None for none (0 or None); a negative one
    raises HearthError."""
    if seconds is not None and seconds < 0:
        raise HearthError(f"the longest queue wait is 0 (no limit) or more seconds, not {seconds:g}")
    return seconds or None


def key_defaults(request: Request) -> dict[str, Any]:
    """What the key that let ``request`` in says of it (security.py put it in its state): its class when
    it names none (a device key's; otherwise interactive), and the key's name as the request's label."""
    state = request.scope.get("state", {})
    name = (state.get(KEY_STATE) or ("", ""))[0]
    return {"priority": API_CLASSES.get(state.get(KEY_PRIORITY, ""), Priority.API), "label": name}


def lease_headers(lease: Lease | None) -> dict[str, str]:
    """``X-Hearth-Load-Ms`` on a reply that waited for its model to load."""
    if lease is None or lease.load_ms is None:
        return {}
    return {"X-Hearth-Load-Ms": f"{lease.load_ms:.0f}"}


def serve_request(req: ApiRequest, t: Target, base: Layered | None = None, *, priority: int = Priority.API,
                  max_wait_s: float | None = None, label: str = "") -> ServeRequest:
    """``req`` for ``t``'s scheduler, its settings over ``base`` (its model's layers: request_defaults.py;
    None: the engine's defaults); raises ApiError (400) for what ``t``'s model cannot do as asked.
    ``priority``: its class when it names none (its key's default); ``max_wait_s``: the longest it may
    wait in the engine's queue (then QueueTimeout: a 503); ``label``: who asked (its key's name)."""
    think = t.scheduler.think
    kwargs = req.template_kwargs
    if req.thinking is not None and think is not None and think.kind == "switch":
        kwargs = {**(kwargs or {}), think.variable: req.thinking}  # a protocol's own thinking switch
    try:
        check_think(think, kwargs)
    except TemplateVarsError as e:
        raise ApiError(400, str(e), param=e.param) from None
    plan = None
    if req.tools:
        try:
            plan = plan_tools(t.scheduler.engine, req.tools, req.tool_choice, req.parallel_tool_calls)
            if plan.calling() is not None:
                plan.grammar()  # a schema the grammar cannot express is refused here, before any work
        except ToolError as e:
            raise ApiError(400, str(e), param=e.param) from None
        except ToolsUnsupported as e:
            if req.tool_choice != "none":
                raise ApiError(400, str(e), param="tools", code="tools_not_supported") from None
            # a model whose template takes no tools answers in text, which is all "none" asks
    try:
        return ServeRequest(messages=req.messages, prompt=req.prompt, params=sampling_for(req, base),
                            grammar=req.grammar, grammar_scope=req.grammar_scope, template_kwargs=kwargs, tools=plan,
                            context_policy=req.context_policy,
                            priority=Priority(req.priority if req.priority is not None else priority),
                            max_wait_s=max_wait_s, label=label)
    except HearthError as e:
        raise ApiError(400, str(e)) from None


def count_request(body: Any) -> ApiRequest:
    """A ``/v1/messages/count_tokens`` body as the Messages request whose prompt it counts: without
    ``max_tokens`` (this route takes none), and with the ``chat_template_kwargs`` the OpenAI path takes
    (Hearth's own field here), so that a client which sends its Think choice there (another Hearth's
    remote engine) counts the prompt its reply will read."""
    if isinstance(body, dict) and "max_tokens" not in body:
        body = {**body, "max_tokens": 1}
    req = anthropic_wire().parse(body)
    try:
        kw = chat_template_kwargs(body.get("chat_template_kwargs"))
    except TemplateVarsError as e:
        raise ApiError(400, str(e), param=e.param) from None
    if kw:
        req.template_kwargs = {**(req.template_kwargs or {}), **kw}
    return req

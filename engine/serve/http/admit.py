"""What a parsed API request becomes before it is queued: a ServeRequest for the model it names.

Everything the request can be refused for without generating is checked here, so a
bad request is a plain 400 before any work: the template's variables and thinking
switch, and the tools (a schema the grammar cannot express, a model that takes none).
"""
from __future__ import annotations

from ...errors import HearthError, ToolsUnsupported
from ...reply_formats.tools import ToolError
from ...library.model_settings import Layered
from ..protocols.openai import ApiError, ApiRequest
from ..protocols.template_vars import TemplateVarsError, check_think
from ..runtime.requests import ServeRequest
from ..runtime.targets import Lease, Target
from .request_defaults import sampling_for


def lease_headers(lease: Lease | None) -> dict[str, str]:
    """``X-Hearth-Load-Ms`` on a reply that waited for its model to load."""
    if lease is None or lease.load_ms is None:
        return {}
    return {"X-Hearth-Load-Ms": f"{lease.load_ms:.0f}"}


def serve_request(req: ApiRequest, t: Target, base: Layered | None = None) -> ServeRequest:
    """``req`` for ``t``'s scheduler, its settings over ``base`` (its model's layers: request_defaults.py;
    None: the engine's defaults); raises ApiError (400) for what ``t``'s model cannot do as asked."""
    think = t.scheduler.engine.think
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
            plan = t.scheduler.engine.plan_tools(req.tools, req.tool_choice, req.parallel_tool_calls)
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
                            context_policy=req.context_policy)
    except HearthError as e:
        raise ApiError(400, str(e)) from None

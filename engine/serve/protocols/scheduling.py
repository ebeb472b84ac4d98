"""What a request asks of the engine core beside its prompt: its priority class and its thinking budget.

**Priority**, as vLLM's OpenAI server takes it (``priority`` on every generating endpoint):
a whole number, lower is more urgent, 0 by default. The engine core has classes, not
numbers (engine/core/job.py): 0 and below are interactive (a person or an agent waiting),
above 0 background (work nobody waits on: titles, summaries, batch jobs); the class names
themselves, ``"interactive"`` and ``"background"``, are taken too. The window's class is
never reachable from the API. A request that names none gets its key's default
(engine/serve/http/keys.py), else interactive.

**Thinking budget**: the most tokens a thinking model may reason for before its block is
closed (SamplingParams.reasoning_budget). On the OpenAI endpoints it is llama-server's
per-request field, ``reasoning_budget_tokens``: -1 (as leaving it out) means the model's own
setting, N >= 0 a budget. Anthropic's Messages API says it in ``thinking.budget_tokens``
(anthropic.py reads it).

No HTTP here: a bad value raises ApiError (400) naming the field.
"""
from __future__ import annotations

from typing import Any

from ...core.job import Priority
from .errors import bad
from .openai import ApiRequest
from .template_vars import short

# The API's classes by name; the window's (Priority.WINDOW) is the app's alone.
API_CLASSES = {"interactive": Priority.INTERACTIVE, "background": Priority.BACKGROUND}
INT64 = 1 << 63            # vLLM's bounds for ``priority``
INT32 = 1 << 31            # llama-server's for ``reasoning_budget_tokens``
BUDGET_FIELD = "reasoning_budget_tokens"


def priority_class(value: Any, param: str = "priority") -> Priority:
    """The engine core's class for an API ``priority`` (a whole number or a class name)."""
    if isinstance(value, str) and value.strip().lower() in API_CLASSES:
        return API_CLASSES[value.strip().lower()]
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(param, f"{param} must be a whole number (lower is more urgent: 0 and below interactive, above 0 "
                         f"background) or one of {', '.join(API_CLASSES)}, got {short(value)}",
                  code="invalid_priority")
    if not -INT64 <= value < INT64:
        raise bad(param, f"{param} must be a 64-bit whole number, got {short(value)}", code="invalid_priority")
    return Priority.INTERACTIVE if value <= 0 else Priority.BACKGROUND


def priority_of(body: dict) -> Priority | None:
    """A request body's ``priority`` as a class; None when it names none (its key's default applies)."""
    v = body.get("priority")
    return None if v is None else priority_class(v)


def budget_of(body: dict) -> int | None:
    """llama-server's ``reasoning_budget_tokens``: None for -1 or absent (the model's own setting)."""
    v = body.get(BUDGET_FIELD)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not -1 <= v < INT32:
        raise bad(BUDGET_FIELD, f"{BUDGET_FIELD} must be a whole number: -1 for the model's own setting, or the "
                                f"most tokens a thinking model may reason for (0 and up), got {short(v)}",
                  code="invalid_reasoning_budget")
    return None if v == -1 else v


def thinking_budget(thinking: Any) -> int | None:
    """Anthropic's ``thinking.budget_tokens`` (with ``type: enabled`` only); None when not given."""
    if not isinstance(thinking, dict) or "budget_tokens" not in thinking:
        return None
    param = "thinking.budget_tokens"
    if thinking.get("type") != "enabled":
        raise bad(param, f"{param} goes with {{\"type\": \"enabled\"}} only, not {short(thinking.get('type'))}")
    v = thinking["budget_tokens"]
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < INT32:
        raise bad(param, f"{param} must be a whole number of tokens (0 and up): the most the model may think "
                         f"for before its reasoning is closed, got {short(v)}", code="invalid_reasoning_budget")
    return v


def with_scheduling(req: ApiRequest, body: dict, *, budget: bool = True) -> ApiRequest:
    """``req`` (a checked ApiRequest) with the body's ``priority`` and, where ``budget``, its
    ``reasoning_budget_tokens`` (into its sampling fields, over the model's setting)."""
    req.priority = priority_of(body)
    if budget:
        n = budget_of(body)
        if n is not None:
            req.sampling["reasoning_budget"] = n
    return req


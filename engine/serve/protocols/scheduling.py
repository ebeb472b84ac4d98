"""What a request asks of the engine core beside its prompt: its priority class.

**Priority**, as vLLM's OpenAI server takes it (``priority`` on every generating endpoint):
a whole number, lower is more urgent, 0 by default. The engine core has classes, not
numbers (engine/core/job.py): 0 and below are interactive (a person or an agent waiting),
above 0 background (work nobody waits on: titles, summaries, batch jobs); the class names
themselves, ``"interactive"`` and ``"background"``, are taken too. The window's class is
never reachable from the API. A request that names none gets its key's default
(engine/serve/http/keys.py), else interactive.

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


def with_scheduling(req: ApiRequest, body: dict) -> ApiRequest:
    """``req`` (a checked ApiRequest) with the body's ``priority``."""
    req.priority = priority_of(body)
    return req

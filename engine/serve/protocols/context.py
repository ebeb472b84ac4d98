"""How an API request asks what happens when its conversation outgrows the context.

OpenAI's Responses API has ``truncation``: ``"disabled"`` (its default: a request too long is an
error) or ``"auto"`` (the oldest input items are dropped to fit). Hearth reads the same field on
Chat Completions and Messages, and its own ``context_policy`` on all three, naming any of the
engine's four policies (engine/prompt/view.py: stop, drop_oldest, shift, compact). Without either
the API's default stays an error when too long (HTTP 400), as the protocols say.
"""
from __future__ import annotations

from ...prompt.view import CONTEXT_POLICIES
from .errors import bad

TRUNCATION = {"disabled": "error", "auto": "drop_oldest"}


def context_policy(body: dict) -> str:
    """The request's context policy: ``truncation`` or ``context_policy`` (400 for anything else), else "error"."""
    truncation, policy = body.get("truncation"), body.get("context_policy")
    if truncation is not None and policy is not None:
        raise bad("context_policy", "give truncation or context_policy, not both")
    if truncation is not None:
        if truncation not in TRUNCATION:
            raise bad("truncation", f"truncation must be auto or disabled, got {truncation!r}")
        return TRUNCATION[truncation]
    if policy is not None:
        if policy not in CONTEXT_POLICIES:
            raise bad("context_policy", f"context_policy must be one of {', '.join(CONTEXT_POLICIES)}, got {policy!r}")
        return policy
    return "error"

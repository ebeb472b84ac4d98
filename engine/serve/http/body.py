"""What every route shares below its wire format: reading the body, and answering a failure.

A body is read up to a size limit and parsed as JSON, and a value that nests
deeper than any request needs is refused before any other code walks it (a
``repr`` in an error message, a template, ``json.dumps``: each would recurse
as deep as the client chose). A refusal is an :class:`ApiError`; a bug in a
route is logged here with its traceback and answered as a 500 in the same
shape, never as Starlette's plain-text page.
"""
from __future__ import annotations

import json
import logging
import math
from typing import Any, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...errors import HearthError, PromptTooLongError
from ..protocols import anthropic
from ..protocols.openai import ApiError
from ..runtime.requests import QueueFull, QueueTimeout
from ..protocols.template_vars import depth

log = logging.getLogger("hearth.serve")

ANTHROPIC_PATH = "/v1/messages"
MAX_DEPTH = 64  # nesting levels; a chat request needs 5, a deep JSON schema a few dozen


def api_error(e: HearthError) -> ApiError:
    """The HTTP answer to a failure the engine or the scheduler reported."""
    if isinstance(e, QueueFull):
        return ApiError(429, str(e), type="rate_limit_error", code="queue_full",
                        headers={"Retry-After": str(max(1, math.ceil(e.retry_after_s)))})
    if isinstance(e, QueueTimeout):  # Anthropic's shape makes it 529 overloaded_error, which its clients retry
        return ApiError(503, str(e), type="server_error", code="queue_timeout",
                        headers={"Retry-After": str(max(1, math.ceil(e.retry_after_s)))})
    if isinstance(e, PromptTooLongError):
        return ApiError(400, str(e), param="messages", code="context_length_exceeded")
    # Everything else the engine reports as a HearthError is about the request
    # (its template, grammar or length); the scheduler turns its own bugs into one too.
    return ApiError(400, str(e))


def internal_error(e: BaseException) -> ApiError:
    """A bug's answer: a 500 that names the exception; the traceback stays in the local log."""
    return ApiError(500, f"the server failed on this request ({type(e).__name__}: {e}); "
                         "the traceback is in the server's log", type="server_error", code="internal_error")


def is_anthropic(path: str) -> bool:
    """Whether ``path`` is Anthropic's Messages API (its errors take Anthropic's shape)."""
    return path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/")


def error_body_for(e: ApiError, path: str) -> dict[str, Any]:
    """``e`` in the shape of the protocol ``path`` belongs to (OpenAI's unless another claims it)."""
    return anthropic.error_body(e) if is_anthropic(path) else e.body()


def error_status_for(e: ApiError, path: str) -> int:
    return anthropic.error_status(e) if is_anthropic(path) else e.status


def error_response(e: ApiError, path: str) -> JSONResponse:
    return JSONResponse(error_body_for(e, path), status_code=error_status_for(e, path), headers=e.headers)


Endpoint = Callable[[Request], Awaitable[Response]]


def guarded(endpoint: Endpoint) -> Endpoint:
    """``endpoint`` with its bugs answered: any exception it lets through is logged with its
    traceback and becomes a 500 in the protocol's error shape."""
    async def run(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as e:  # a bug: the client gets a clear 500, the log the traceback
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(internal_error(e), request.url.path)
    return run


async def read_body(request: Request, limit: int) -> bytes:
    """The body's bytes, refusing more than ``limit`` without reading past it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body is {int(declared):,} bytes; this server takes at most {limit:,}",
                       code="request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the request body is over {limit:,} bytes, the most this server takes",
                           code="request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON, refusing more than ``limit`` bytes without reading past it, and any
    value nested deeper than MAX_DEPTH."""
    data = await read_body(request, limit)
    too_deep = ApiError(400, f"the request body nests more than {MAX_DEPTH} levels deep; no request needs that",
                        code="invalid_json")
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None
    except RecursionError:  # thousands of nested brackets: the parser gave up before our own check
        raise too_deep from None
    except ValueError as e:  # valid JSON Python will not read, e.g. an integer of over 4,300 digits
        raise ApiError(400, f"the request body cannot be read: {e}", code="invalid_json") from None
    if depth(body, MAX_DEPTH) >= MAX_DEPTH:  # depth counts the levels below the body's own
        raise too_deep
    return body

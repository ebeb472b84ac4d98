"""Who may talk to the local server: the checks every request passes first.

The server binds 127.0.0.1 only, but a web page in the user's browser can
still reach 127.0.0.1. Two guards close that door:
- DNS rebinding: a page on ``evil.example`` whose name re-resolves to
  127.0.0.1 sends ``Host: evil.example``. Only localhost names are served.
- Cross-site requests: a browser sends ``Origin`` with every cross-origin
  POST, even the "simple" ones that skip a CORS preflight. A request whose
  Origin is not on the user's allow-list is refused outright (without an
  allow-list, every browser origin is), so no page can spend the user's
  model or read its replies.
Then the optional API key (``Authorization: Bearer <key>``, or ``x-api-key: <key>``
as Anthropic's clients send it), compared in constant time. Allowed origins get CORS headers (Starlette's middleware)
and their preflights pass without the key, as browsers send none.
"""
from __future__ import annotations

import hmac
import json
from typing import Any, Callable, Iterable

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from .body import error_body_for, error_status_for
from ..protocols.openai import ApiError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
BIND_HOST = "127.0.0.1"


def check_bind_host(host: str) -> str:
    """The address to bind: 127.0.0.1 (or ``localhost``); any other host is refused."""
    from ...errors import HearthError

    if host in ("127.0.0.1", "localhost"):
        return BIND_HOST
    raise HearthError(f"the local server binds 127.0.0.1 only (asked for {host!r}): it is for programs on this "
                      "machine; other machines cannot reach it")


def allowed_hosts(port: int) -> frozenset[str]:
    """Host header values that name this server: the localhost names, with or without its port."""
    return frozenset([*LOCAL_HOSTS, *(f"{h}:{port}" for h in LOCAL_HOSTS)])


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return v.decode("latin-1")
    return None


async def send_error(send: Send, scope: Scope, status: int, message: str, *, type: str, code: str | None,
                     headers: Iterable[tuple[str, str]] = ()) -> None:
    """A JSON error straight on the ASGI channel (no app route ran), in the shape of the
    protocol the request's path belongs to (http.error_body)."""
    e = ApiError(status, message, type=type, code=code)
    path = scope.get("path", "")
    status = error_status_for(e, path)
    body = json.dumps(error_body_for(e, path)).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    hdrs += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


class KeyCheck:
    """Refuses requests without the API key (when one is set). Reads the key on every
    request, so a regenerated key takes effect at once."""

    def __init__(self, app: ASGIApp, get_key: Callable[[], str | None]) -> None:
        self.app, self.get_key = app, get_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self.get_key()
        if scope["type"] == "http" and key:
            auth = _header(scope, b"authorization") or ""
            scheme, _, given = auth.partition(" ")
            if scheme.lower() != "bearer":
                given = _header(scope, b"x-api-key") or ""  # Anthropic's clients send the key this way
            if not hmac.compare_digest(given.strip().encode(), key.encode()):
                await send_error(send, scope, 401, "invalid or missing API key: send it as 'Authorization: "
                                                   "Bearer <key>' or 'x-api-key: <key>' (Hearth shows it in "
                                                   "Settings → Local server)",
                                 type="invalid_request_error", code="invalid_api_key",
                                 headers=[("www-authenticate", "Bearer")])
                return
        await self.app(scope, receive, send)


class Guard:
    """Host and Origin checks, then CORS for allowed origins, then the key check."""

    def __init__(self, app: ASGIApp, *, port: Callable[[], int], get_key: Callable[[], str | None],
                 cors_origins: Iterable[str] = ()) -> None:
        self.port = port
        self.origins = frozenset(o.rstrip("/") for o in cors_origins)
        inner: Any = KeyCheck(app, get_key)
        if self.origins:
            inner = CORSMiddleware(inner, allow_origins=sorted(self.origins), allow_methods=["GET", "POST"],
                                   allow_headers=["authorization", "content-type", "x-api-key", "anthropic-version",
                                                  "anthropic-beta"], max_age=600)
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        host = (_header(scope, b"host") or "").lower()
        if host not in allowed_hosts(self.port()):
            await send_error(send, scope, 403, f"this server answers only to localhost names, not Host {host!r} "
                                        "(a guard against DNS rebinding)",
                             type="invalid_request_error", code="host_not_allowed")
            return
        origin = _header(scope, b"origin")
        if origin is not None and origin.rstrip("/") not in self.origins:
            await send_error(send, scope, 403, f"requests from the web origin {origin!r} are not allowed; add it to "
                                        "the CORS allow-list in Settings → Local server to let that page in",
                             type="invalid_request_error", code="origin_not_allowed")
            return
        await self.inner(scope, receive, send)

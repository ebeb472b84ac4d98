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
Off loopback (``engine serve --listen``) the Host check gives way to a key on
every request (the key ring's keys, each with its own rate limit) and TLS.
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
from .keys import KeyRing, RateLimit
from ..protocols.openai import ApiError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
BIND_HOST = "127.0.0.1"
KEY_STATE = "hearth_key"  # request.state's (name, id) of the key that let a request in (its use is counted)
KEY_PRIORITY = "hearth_key_priority"  # request.state's default class of that key (keys.PRIORITIES), if a device key
SETTINGS_KEY = ("settings key", "settings")


def is_loopback_bind(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine alone, as the default does."""
    return host in ("127.0.0.1", "localhost")


def check_bind_host(host: str, *, listen: bool = False) -> str:
    """The address to bind: 127.0.0.1 (or ``localhost``); another address only when the user asked
    to let other devices in (``listen``: ``engine serve --listen``, the Local server tab's switch)."""
    from ...errors import HearthError

    if is_loopback_bind(host):
        return BIND_HOST
    if listen and host.strip():
        return host.strip()
    raise HearthError(f"the local server binds 127.0.0.1 only (asked for {host!r}): to let other devices use "
                      "it, ask for that (`engine serve --listen ADDR`, or Settings → Local server)")


def check_exposure(host: str, tls: bool, keyed: bool) -> bool:
    """Whether a server bound to ``host`` is exposed beyond loopback; if it is, it must have TLS and a key."""
    from ...errors import HearthError

    if is_loopback_bind(host):
        return False
    if not tls:
        raise HearthError(f"listening on {host} needs TLS: other devices' requests and keys would cross the "
                          "network in clear")
    if not keyed:
        raise HearthError(f"listening on {host} needs an API key: make one with `python -m engine keys new NAME` "
                          "(it is shown once)")
    return True


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
    """Refuses requests without a valid API key: the one key set in Settings (read on every
    request, so a regenerated key takes effect at once) or any key of the key ring. ``required``:
    refuse even when no key is set (a server other devices reach). With a rate limit, each key
    (the single key counts as one) gets its own budget of requests per minute, then 429."""

    def __init__(self, app: ASGIApp, get_key: Callable[[], str | None], *, keys: KeyRing | None = None,
                 required: bool = False, limit: RateLimit | None = None) -> None:
        self.app, self.get_key, self.keys, self.required, self.limit = app, get_key, keys, required, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self.get_key()
        if scope["type"] == "http" and (key or self.required or (self.keys is not None and self.keys.entries())):
            auth = _header(scope, b"authorization") or ""
            scheme, _, given = auth.partition(" ")
            if scheme.lower() != "bearer":
                given = _header(scope, b"x-api-key") or ""  # Anthropic's clients send the key this way
            given = given.strip()
            who: str | None = None
            if key and hmac.compare_digest(given.encode(), key.encode()):
                who = "settings key"
                scope.setdefault("state", {})[KEY_STATE] = SETTINGS_KEY
            elif given and self.keys is not None and (entry := self.keys.match(given)) is not None:
                who = entry.id
                scope.setdefault("state", {})[KEY_STATE] = (entry.name, entry.id)
                scope["state"][KEY_PRIORITY] = entry.priority
            if who is None:
                await send_error(send, scope, 401, "invalid or missing API key: send it as 'Authorization: "
                                                   "Bearer <key>' or 'x-api-key: <key>' (Hearth shows it in "
                                                   "Settings → Local server)",
                                 type="invalid_request_error", code="invalid_api_key",
                                 headers=[("www-authenticate", "Bearer")])
                return
            wait = self.limit.take(who) if self.limit is not None else 0.0
            if wait and self.limit is not None:
                await send_error(send, scope, 429, f"this key's limit of {self.limit.per_minute} requests a "
                                                   f"minute is spent; try again in {wait:.0f} s",
                                 type="rate_limit_error", code="rate_limit_exceeded",
                                 headers=[("retry-after", f"{wait:.0f}")])
                return
        await self.app(scope, receive, send)


class Guard:
    """Host and Origin checks, then CORS for allowed origins, then the key check."""

    def __init__(self, app: ASGIApp, *, port: Callable[[], int], get_key: Callable[[], str | None],
                 cors_origins: Iterable[str] = (), exposed: bool = False, keys: KeyRing | None = None,
                 limit: RateLimit | None = None) -> None:
        """``exposed``: the server listens beyond loopback. Any Host is then answered (the names other
        devices reach it by are many) and the key is required on every request instead."""
        self.port = port
        self.exposed = exposed
        self.origins = frozenset(o.rstrip("/") for o in cors_origins)
        inner: Any = KeyCheck(app, get_key, keys=keys, required=exposed, limit=limit)
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
        if not self.exposed and host not in allowed_hosts(self.port()):
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

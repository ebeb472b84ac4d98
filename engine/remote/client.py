"""OpenAI's chat API as a client speaks it: the models a server offers, and a reply's stream of chunks.

Every failure is one line that says what happened (refused, timed out, TLS, a
changed certificate, the key refused, a model the server does not have, too many
requests and when to come back, the server busy, a stream cut or garbled), as a
wire.RemoteError whose ``kind`` the window and the tests read.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..reply_formats import ThinkControl
from .errors import RemoteError, lost
from .transport import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, Endpoint, Pins, Response, request

MAX_ERROR_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class RemoteModel:
    """One model a server lists: its id, its context when the server says (Hearth's
    ``context_length``, vLLM's ``max_model_len``, llama-server's ``meta.n_ctx_train``), who runs it, and
    the Think control its template offers where the server says (a Hearth's ``hearth_think``)."""
    id: str
    n_ctx: int | None = None
    owned_by: str = ""
    loaded: bool | None = None
    think: ThinkControl | None = None


def _n_ctx(card: dict[str, Any]) -> int | None:
    for v in (card.get("context_length"), card.get("max_model_len"),
              (card.get("meta") or {}).get("n_ctx_train") if isinstance(card.get("meta"), dict) else None):
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _retry_after(resp: Response) -> float | None:
    try:
        return max(0.0, float(resp.headers.get("retry-after", "")))
    except ValueError:
        return None


def _error_text(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:200]
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)[:300]
    if isinstance(err, str):
        return err[:300]
    if isinstance(data, dict) and data.get("detail"):
        return str(data["detail"])[:300]
    return str(data)[:200]


@dataclass
class Client:
    """One server: its endpoint, the key sent as ``Authorization: Bearer`` and the certificate pins."""
    endpoint: Endpoint
    key: str | None = None
    pins: Pins | None = None
    connect_timeout: float = CONNECT_TIMEOUT_S
    idle_timeout: float = READ_TIMEOUT_S
    headers: dict[str, str] = field(default_factory=dict)

    def _headers(self, body: bool) -> dict[str, str]:
        h = {"Accept": "application/json, text/event-stream", **self.headers}
        if body:
            h["Content-Type"] = "application/json"
        if self.key:
            h["Authorization"] = f"Bearer {self.key}"
        return h

    def call(self, method: str, path: str, payload: Any = None, *, cancel: threading.Event | None = None,
             what: str = "") -> Response:
        """Send a request; a response that is not 2xx raises the RemoteError that says why."""
        body = None if payload is None else json.dumps(payload, ensure_ascii=False).encode()
        resp = request(self.endpoint, method, path, body=body, headers=self._headers(body is not None),
                       pins=self.pins, cancel=cancel, connect_timeout=self.connect_timeout,
                       idle_timeout=self.idle_timeout)
        if 200 <= resp.status < 300:
            return resp
        try:
            text = _error_text(resp.read(MAX_ERROR_BYTES))
        except RemoteError:
            text = ""
        raise self._status_error(resp, text, what)

    def _status_error(self, resp: Response, text: str, what: str) -> RemoteError:
        at, s = self.endpoint.address, resp.status
        said = f": {text}" if text else ""
        if s == 401:
            return RemoteError(f"{at} refused the API key (401){said}", "auth", status=s)
        if s == 403:
            return RemoteError(f"{at} refused the request (403){said}", "auth", status=s)
        if s == 404:
            return RemoteError(f"{at} has no {what or 'such route'} ({s}){said}", "not_found", status=s)
        if s == 429:
            wait = _retry_after(resp)
            when = f"; it asks to wait {wait:.0f} s" if wait is not None else ""
            return RemoteError(f"{at} has too many requests (429){when}{said}", "rate_limited", status=s,
                               retry_after=wait)
        if s in (502, 503, 504):
            wait = _retry_after(resp)
            when = f"; it asks to wait {wait:.0f} s" if wait is not None else ""
            return RemoteError(f"{at} is unavailable ({s}){when}{said}", "unavailable", status=s, retry_after=wait)
        return RemoteError(f"{at} answered {s} {resp.reason}{said}", "http", status=s)

    def json(self, method: str, path: str, payload: Any = None, *, cancel: threading.Event | None = None,
             what: str = "") -> Any:
        resp = self.call(method, path, payload, cancel=cancel, what=what)
        body = resp.read()
        try:
            return json.loads(body)
        except ValueError:
            raise RemoteError(f"{self.endpoint.address} sent a reply that is not JSON: {body[:60]!r}",
                              "malformed") from None

    def models(self, cancel: threading.Event | None = None) -> list[RemoteModel]:
        """``GET /models``: what the server offers."""
        data = self.json("GET", "/models", cancel=cancel, what="model list (/models): is this an OpenAI-compatible "
                                                               "server, and is its address right (…/v1)?")
        cards = data.get("data") if isinstance(data, dict) else None
        if not isinstance(cards, list):
            raise RemoteError(f"{self.endpoint.address}'s /models is not a model list", "malformed")
        out = []
        for c in cards:
            if isinstance(c, dict) and isinstance(c.get("id"), str) and c["id"]:
                loaded = c.get("loaded")
                out.append(RemoteModel(c["id"], _n_ctx(c), str(c.get("owned_by") or ""),
                                       loaded if isinstance(loaded, bool) else None,
                                       ThinkControl.from_dict(c.get("hearth_think"))))
        return out

    def stream_chat(self, payload: dict[str, Any], cancel: threading.Event | None = None) -> Iterator[dict[str, Any]]:
        """``POST /chat/completions`` with ``stream: true``: each chunk's JSON as it arrives, until ``[DONE]``
        or the stream's end (a stream cut before either raises a RemoteError of kind ``lost``)."""
        resp = self.call("POST", "/chat/completions", {**payload, "stream": True}, cancel=cancel,
                         what=f"model {payload.get('model')!r}")
        yield from sse_json(resp, self.endpoint.address)


def sse_json(resp: Response, where: str) -> Iterator[dict[str, Any]]:
    """Server-sent events' ``data:`` payloads as JSON objects. An event named ``error`` or a payload
    with an ``error`` raises; text that is not SSE or JSON raises a RemoteError of kind ``malformed``."""
    ctype = resp.headers.get("content-type", "")
    if "text/event-stream" not in ctype:
        body = resp.read(MAX_ERROR_BYTES)
        raise RemoteError(f"{where} did not stream (content type {ctype or 'none'}): {body[:80]!r}", "malformed")
    buf = bytearray()
    data: list[bytes] = []
    event = b""
    done = False
    for chunk in resp.chunks():
        buf += chunk
        while (i := buf.find(b"\n")) >= 0:
            line = bytes(buf[:i]).rstrip(b"\r")
            del buf[:i + 1]
            if line:
                if line.startswith(b":"):
                    continue  # a comment: a keep-alive
                name, _, value = line.partition(b":")
                value = value[1:] if value.startswith(b" ") else value
                if name == b"data":
                    data.append(value)
                elif name == b"event":
                    event = value
                elif name not in (b"id", b"retry"):
                    raise RemoteError(f"{where} sent a line that is not server-sent events: {line[:60]!r}",
                                      "malformed")
                continue
            if not data:
                continue
            payload = b"\n".join(data)
            data, name_was = [], event
            event = b""
            if payload.strip() == b"[DONE]":
                done = True
                resp.close()
                return
            try:
                obj = json.loads(payload)
            except ValueError:
                raise RemoteError(f"{where} sent an event that is not JSON: {payload[:60]!r}", "malformed") from None
            if not isinstance(obj, dict):
                raise RemoteError(f"{where} sent an event that is not a JSON object", "malformed")
            if name_was == b"error" or "error" in obj:
                err = obj.get("error", obj)
                msg = err.get("message") if isinstance(err, dict) else err
                raise RemoteError(f"{where} ended the reply with an error: {msg}", "http")
            yield obj
    if not done:
        raise lost(where)

"""The local OpenAI-compatible server: Starlette routes over the scheduler, uvicorn in a thread.

The same :class:`LocalServer` runs headless (``python -m engine serve``) and in
the app (Settings → Local server). It serves whatever scheduler is attached:
the app attaches a new one after each model load and detaches it while a model
loads, when requests get a 503 that says so.

A ticket's ``events()`` blocks, so each request's events are read on a thread
of its own (pump.py) and uvicorn's event loop stays free for other clients.
A request's first event is awaited before the response starts, so a prompt
too long for the context is a plain 400, not an error inside a stream. A
client that goes away cancels its request: sse-starlette notices the
disconnect while streaming, and a watcher does for a non-streamed reply.
"""
from __future__ import annotations

import socket
import threading
import time
from collections import deque
from typing import AsyncIterator, Iterable

import anyio
import uvicorn
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import HearthError
from ...library.model_defaults import ServedDefaults
from ...types import StreamEvent
from .body import api_error, error_response, guarded, internal_error, log, read_json
from ..protocols.openai import ApiError
from .pump import Pump
from ..runtime.requests import QueueFull, Ticket
from ..runtime.scheduler import Scheduler
from .keys import KeyRing, RateLimit
from .security import Guard, check_bind_host, check_exposure
from .tls import TlsFiles
from .audio_routes import AudioRoutes
from .request_defaults import RequestDefaults
from ..runtime.pool import ModelPool, keep_alive
from ..protocols.responses import ResponseStore
from ..runtime.targets import Lease, Target, Targets
from .admit import count_request, key_defaults, lease_headers, max_wait, serve_request
from ..metrics import ServerMetrics
from .observe import finished_request, metrics_route, request_key, scheduler_gauges
from ..protocols.dialect import Reply, Wire, anthropic_wire, openai_wire, responses_wire

DEFAULT_PORT = 8765    # LM Studio 1234, Ollama 11434, Jan 1337, GPT4All 4891, llama-server 8080
MAX_BODY = 32 << 20    # bytes: a chat request is a few KB; an inline image (base64 data: URL) up to 20 MiB
STARTUP_TIMEOUT_S = 10.0
REAP_EVERY_S = 5.0     # how often models the API loaded are checked for their idle time
MAX_QUEUE_WAIT_S = 120.0  # the longest an API request waits for the model to start it, then 503 + Retry-After


class LocalServer:
    """The OpenAI-compatible API on 127.0.0.1, over whatever scheduler is attached."""

    def __init__(self, *, port: int = DEFAULT_PORT, api_key: str | None = None,
                 cors_origins: Iterable[str] = (), max_body: int = MAX_BODY, host: str = "127.0.0.1",
                 pool: ModelPool | None = None, listen: bool = False, tls: TlsFiles | None = None,
                 keys: KeyRing | None = None, rate_limit: int = 0, audio: AudioRoutes | None = None,
                 metrics: ServerMetrics | None = None, defaults: ServedDefaults | None = None,
                 max_queue_wait: float | None = MAX_QUEUE_WAIT_S) -> None:
        """``pool``: the library's models, loaded when a request names one (None: only the
        attached model is served). ``listen``: ``host`` may be an address other devices reach;
        the server then refuses to start without TLS (``tls``) and a key (``api_key`` or one in
        ``keys``). ``rate_limit``: requests a minute per key (0: none). ``audio``: the speech routes.
        ``metrics``: where finished requests are counted (the app keeps one across restarts).
        ``defaults``: each model's settings, for what a request leaves out (None: the engine's defaults).
        ``max_queue_wait``: seconds a request may wait for the model to start it (0 or None: no limit)."""
        self.host = check_bind_host(host, listen=listen)
        self.exposed = check_exposure(self.host, tls is not None, bool(api_key) or bool(keys and keys.entries()))
        self.tls, self.keys = tls, keys
        self.requested_port = port
        self.api_key = api_key or None
        self.max_body = max_body
        self.max_queue_wait = max_wait(max_queue_wait)  # read per request: the app changes it without a restart
        self._port = 0
        self.targets = Targets(pool)
        self._lock = threading.Lock()
        self._active: set[Ticket] = set()
        self.served = 0    # API replies completed
        # The latest requests' tickets, whose ``times`` say where each one's time went.
        self.finished: deque[Ticket] = deque(maxlen=64)
        self.responses = ResponseStore()  # what /v1/responses' previous_response_id continues
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._leases: dict[Ticket, Lease] = {}
        self._keys: dict[Ticket, tuple[str, str] | None] = {}  # the key each request came with
        self.metrics = metrics or ServerMetrics()
        self.metrics.set_gauges(lambda: scheduler_gauges(self.targets))
        self._reaper: threading.Thread | None = None
        self._stopping = threading.Event()
        self.audio = audio or AudioRoutes()
        self.defaults = RequestDefaults(defaults)
        routes = [Route(path, guarded(endpoint), methods=[method]) for path, endpoint, method in (
            ("/v1/models", self._models, "GET"), ("/v1/models/{model_id:path}", self._model, "GET"),
            ("/v1/chat/completions", self._route(openai_wire("chat")), "POST"),
            ("/v1/completions", self._route(openai_wire("completion")), "POST"),
            ("/v1/messages", self._route(anthropic_wire()), "POST"),
            ("/v1/messages/count_tokens", self._count_tokens, "POST"),
            ("/v1/responses", self._route(responses_wire(self.responses)), "POST"),
            ("/metrics", metrics_route(self.metrics), "GET"),
            *self.audio.routes())]
        app = Starlette(routes=routes, exception_handlers={HTTPException: self._http_error})
        self.app = Guard(app, port=lambda: self._port, get_key=lambda: self.api_key, cors_origins=cors_origins,
                         exposed=self.exposed, keys=keys, limit=RateLimit(rate_limit) if rate_limit else None)

    # -- what is served -------------------------------------------------------------

    def attach(self, scheduler: Scheduler) -> None:
        """Serve ``scheduler``'s model from now on."""
        self.targets.attach(scheduler)

    def detach(self, reason: str) -> None:
        """Stop serving the current scheduler; requests for it get a 503 with ``reason`` until the
        next attach (the pool's models are still served)."""
        self.targets.detach(reason)

    @property
    def model_id(self) -> str | None:
        return self.targets.model_id

    @property
    def pool(self) -> ModelPool | None:
        return self.targets.pool

    @property
    def in_flight(self) -> int:
        """API requests queued or being answered now."""
        return len(self._active)

    def active_tickets(self) -> list[Ticket]:
        """The scheduler tickets of the requests in flight (their ``times`` say where time goes)."""
        with self._lock:  # the event loop adds and removes them; this may run on any thread
            return list(self._active)

    # -- routes -------------------------------------------------------------------

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)  # registered for HTTPException only
        msg = (f"no route {request.method} {request.url.path}; this server offers GET /v1/models, "
               "POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, POST /v1/messages, "
               "POST /v1/messages/count_tokens, POST /v1/audio/transcriptions, POST /v1/audio/speech and GET /metrics")
        if exc.status_code != 404:
            msg = f"{exc.detail}: {request.method} {request.url.path}"
        return error_response(ApiError(exc.status_code, msg, code="not_found" if exc.status_code == 404 else None),
                              request.url.path)

    async def _models(self, request: Request) -> Response:
        cards = await anyio.to_thread.run_sync(self.targets.cards)  # a library scan reads headers
        return JSONResponse({"object": "list", "data": cards})

    async def _model(self, request: Request) -> Response:
        mid = request.path_params["model_id"]
        try:
            card = await anyio.to_thread.run_sync(self.targets.card, mid)
        except ApiError as e:
            return error_response(e, request.url.path)
        t = self._loaded(mid)
        path = None if t is not None or self.pool is None else self.pool.catalog().get(mid)
        return JSONResponse(await self.defaults.card(card, t, path))

    def _loaded(self, mid: str) -> Target | None:
        """The loaded model called ``mid``: the server's own or one the pool holds (None: not loaded)."""
        if self.targets.model_id == mid:
            return self.targets.own()
        held = [h for h in (self.pool.held() if self.pool is not None else []) if h.model_id == mid]
        return Target(held[0].scheduler, mid, held[0].n_ctx, held[0].created) if held else None

    async def _count_tokens(self, request: Request) -> Response:
        """Anthropic's ``/v1/messages/count_tokens`` (Claude Code asks it before long requests): the
        tokens the prompt of a Messages body takes, its system, tools and thinking switch included.
        The body is a Messages request without ``max_tokens``; nothing is generated."""
        try:
            body = await read_json(request, self.max_body)
            req = count_request(body)
            lease = await self.targets.lease(req.model, keep_alive(body))
            try:
                t = lease.target
                sreq = serve_request(req, t, await self.defaults.base(t))
                engine = t.scheduler.engine
                n = await anyio.to_thread.run_sync(lambda: engine.count_tokens(sreq.messages or [],
                                                                                sreq.prompt_kwargs))
            except HearthError as e:
                raise ApiError(400, str(e)) from None
            finally:
                self.targets.release(lease)
        except ApiError as e:
            return error_response(e, request.url.path)
        return JSONResponse({"input_tokens": n}, headers=lease_headers(lease))

    def _route(self, wire: Wire):
        async def endpoint(request: Request) -> Response:
            return await self._generate(request, wire)
        return endpoint

    async def _generate(self, request: Request, wire: Wire) -> Response:
        pump: Pump | None = None
        lease: Lease | None = None
        try:
            body = await read_json(request, self.max_body)
            req = wire.parse(body)
            # The model the request names: loaded first when it is another of the library's (a
            # streamed client sees no bytes until it is ready; the load time is in a header).
            lease = await self.targets.lease(req.model, keep_alive(body))
            t = lease.target
            try:
                ticket = t.scheduler.submit(serve_request(req, t, await self.defaults.base(t), **key_defaults(request),
                                                          max_wait_s=max_wait(self.max_queue_wait)))
            except QueueFull as e:
                raise api_error(e) from None
            except HearthError as e:  # the scheduler closed under us: a model switch
                raise ApiError(503, f"the server's model is changing ({e}); try again shortly",
                               type="server_error", code="model_not_ready") from None
            with self._lock:
                self._active.add(ticket)
                self._leases[ticket] = lease  # given back when the request ends
                self._keys[ticket] = request_key(request)
            pump = Pump(ticket)
            try:
                first = await pump.next()
            except HearthError as e:
                raise api_error(e) from None
            if first is None:
                raise ApiError(500, "the request ended without a reply", type="server_error")
            reply = wire.reply(req, t.model_id, first)
        except ApiError as e:
            self._release(pump)
            self.targets.release(lease)
            return error_response(e, request.url.path)
        except BaseException:
            self._release(pump)  # the client left while the request waited for its first token (or a bug)
            self.targets.release(lease)
            raise
        headers = {**lease_headers(lease), **({"X-Hearth-Note": "; ".join(req.notes)} if req.notes else {})}
        if req.stream:
            # The background release covers a client gone before the stream's first chunk, when
            # the generator never starts and so never reaches its own ``finally``.
            return EventSourceResponse(self._stream(pump, first, reply), sep="\n", ping=15,
                                       headers={"Cache-Control": "no-cache", **headers},
                                       background=BackgroundTask(self._release, pump))
        return await self._whole(request, pump, first, reply, headers)

    def _release(self, pump: Pump | None, *, served: bool = False) -> None:
        if pump is None:
            return
        pump.close()  # a finished request ignores it; an abandoned one stops within a step
        ticket = pump.ticket
        with self._lock:
            first = ticket in self._active  # the stream's end and its background task both come here
            if first:
                self._active.discard(ticket)
                self.finished.append(ticket)
            lease = self._leases.pop(ticket, None)
            key = self._keys.pop(ticket, None)
        if first:
            self.metrics.record(finished_request(ticket, pump.final, key))
        self.targets.release(lease)
        if served and first:  # a streamed reply comes here at its end and again from its ``finally``
            self.served += 1

    async def _whole(self, request: Request, pump: Pump, ev: StreamEvent | None, reply: Reply,
                     headers: dict[str, str]) -> Response:
        served = False
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._cancel_on_disconnect, request, pump)
                while ev is not None and ev.kind != "final":  # the final event holds the whole reply
                    ev = await pump.next()
                tg.cancel_scope.cancel()
            if ev is None or ev.stats is None:
                raise ApiError(500, "the request ended without its final event", type="server_error")
            served = ev.finish_reason != "cancelled"
            return JSONResponse(reply.whole(ev), headers=headers)
        except HearthError as e:
            return error_response(api_error(e), request.url.path)
        except ApiError as e:
            return error_response(e, request.url.path)
        finally:
            self._release(pump, served=served)

    @staticmethod
    async def _cancel_on_disconnect(request: Request, pump: Pump) -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        pump.close()

    async def _stream(self, pump: Pump, ev: StreamEvent | None, reply: Reply) -> AsyncIterator[dict[str, str]]:
        served = False
        try:
            for item in reply.opening():
                yield item
            while ev is not None and ev.kind != "final":
                for item in reply.event(ev):
                    yield item
                ev = await pump.next()
            if ev is None or ev.stats is None:
                raise HearthError("the request ended without its final event")
            served = ev.finish_reason != "cancelled"
            # Counted before the client reads the end: a client that reads [DONE] and then asks
            # /metrics (or a test that reads ``finished``) finds this request there.
            self._release(pump, served=served)
            for item in reply.closing(ev):
                yield item
        except HearthError as e:  # after the headers went out: the error goes in the stream, as OpenAI's does
            served = False
            for item in reply.failure(api_error(e)):
                yield item
        except Exception as e:  # a bug after the headers went out: logged, and said in the stream
            served = False
            log.exception("a streamed reply failed")
            for item in reply.failure(internal_error(e)):
                yield item
        finally:
            self._release(pump, served=served)

    # -- running ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port listened on (the real one when started with port 0)."""
        return self._port

    @property
    def url(self) -> str:
        """The address clients use: on loopback 127.0.0.1; listening beyond it, the listen address."""
        host = "127.0.0.1" if not self.exposed else self.host
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{host}:{self._port}/v1"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Bind and serve in a background thread; returns once it accepts connections.
        A port in use raises HearthError at once."""
        if self.running:
            return
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((self.host, self.requested_port))
        except OSError as e:
            sock.close()
            raise HearthError(f"cannot listen on {self.host}:{self.requested_port}: {e.strerror or e}; "
                              "choose another port") from None
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2,
                                ssl_certfile=None if self.tls is None else str(self.tls.cert),
                                ssl_keyfile=None if self.tls is None else str(self.tls.key))
        server = uvicorn.Server(config)
        self._uvicorn = server
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="hearth-server",
                                        daemon=True)
        self._thread.start()
        if self.pool is not None:
            self._stopping.clear()
            self._reaper = threading.Thread(target=self._reap, name="hearth-server-idle", daemon=True)
            self._reaper.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise HearthError(f"the local server did not start on port {self._port}")
            time.sleep(0.01)

    def stop(self) -> None:
        """Cancel the requests in flight, stop listening and wait for the thread."""
        for ticket in self.active_tickets():
            ticket.cancel()
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join()
        self._thread = self._uvicorn = None
        self._stopping.set()
        if self._reaper is not None:
            self._reaper.join()
            self._reaper = None
        if self.pool is not None:
            self.pool.close()  # the models the API loaded; the attached one is its owner's

    def _reap(self) -> None:
        pool = self.pool
        assert pool is not None  # started only with a pool
        while not self._stopping.wait(REAP_EVERY_S):
            for mid in pool.reap():
                log.info("unloaded %s: idle past its keep-alive", mid)

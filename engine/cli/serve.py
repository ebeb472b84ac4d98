"""``python -m engine serve``: the local server without the window, like ``ollama serve``.

The same LocalServer and Scheduler as the app's Settings → Local server; it
runs until Ctrl-C (or SIGTERM), then cancels what is in flight and exits 0.
"""
from __future__ import annotations

import contextlib
import faulthandler
import json
import signal
import sys
import threading
from typing import Literal
from dataclasses import asdict, replace

from ..library.model_defaults import ServedDefaults
from ..library.model_store import memo_dir
from ..sizing.load_spec import AUTO, Auto, LoadSpec, or_auto

from ..remote.errors import fingerprint_text
from ..serve.http.other_devices import exposure
from ..serve.http.server import DEFAULT_PORT, LocalServer
from ..serve.runtime.quiet_gc import settle


READY = "HEARTH-READY "  # the machine-readable line a parent process waits for (engine/workers/child.py)
SHUTDOWN_GRACE_S = 30  # Ctrl-C stops: a shutdown stuck this long is a bug, shown and cut short


@contextlib.contextmanager
def bounded_shutdown(seconds: float = SHUTDOWN_GRACE_S):
    """Shutdown work that must end: past ``seconds`` every thread's stack goes to stderr (where it
    is stuck, to report) and the process exits with status 1, so Ctrl-C never leaves a server running."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _defaults() -> ServedDefaults:
    """What a request leaves out: each model's recommendations and your settings for it (`models defaults`)."""
    from ..paths import data_dir

    return ServedDefaults(memo=memo_dir(data_dir()))


def _say_loaded(m, *, machine_line: bool) -> None:
    """What was loaded: one ``HEARTH-LOADED {json}`` line on stdout for a parent process (``HEARTH-READY
    {"url", "model"}`` follows once it is served), and
    the human summary and the plan's notes on stderr."""
    if machine_line:
        print("HEARTH-LOADED " + json.dumps(asdict(m)), flush=True)
    local = f", {m.local.n_gpu_layers} layers offloaded, speculation {m.local.draft}" if m.local is not None else ""
    print(f"loaded {m.label}: {m.quant}, context {m.n_ctx:,}, runs on {m.runtime} ({m.device}){local}",
          file=sys.stderr, flush=True)
    for note in m.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)


def serve(model: str | None = None, *, port: int = DEFAULT_PORT, parallel: int = 4, api_key: str | None = None,
          n_ctx: int | None = None, n_threads: int | None = None, queue_limit: int = 16,
          cors_origins: tuple[str, ...] = (), idle_unload: float | None = 600.0, mmproj: str | None = None,
          exactness: str | None = None, listen: str | None = None, tls_cert: str | None = None,
          tls_key: str | None = None, rate_limit: int | None = None, rpc: tuple[str, ...] = (),
          request: LoadSpec | None = None, max_queue_wait: float = 120.0, draft: str = "auto") -> int:
    """Load ``model`` through the window's planned load (every setting on Auto but the context
    and threads given), serve it on 127.0.0.1:``port`` until interrupted; the exit status.
    ``idle_unload``: a request naming another model of the library loads it the same way, and
    it is unloaded after this many seconds without requests (None: only ``model`` is served).
    ``mmproj``: its vision projector (default: the one beside it); ``max_queue_wait``: the longest queue wait (s);
    ``draft``: its speculation.
    ``listen``: let other devices in on this address, with TLS (``tls_cert``/``tls_key``, or a
    certificate Hearth makes once) and a key of ``engine keys`` (or ``api_key``) on every request.
    ``rpc``: llama.cpp RPC workers (host:port) whose devices take every layer (each probed first).
    ``request``: the whole load as the window asks for it (its private child for a model on workers: then
    the plan places the layers, and what was loaded is printed as one ``HEARTH-LOADED {json}`` line)."""
    from ..config import default_exactness
    from ..loading.load import load_model
    from ..paths import data_dir
    from ..serve.runtime.library_pool import library_pool
    from ..serve.runtime.scheduler import Scheduler

    pool = None if idle_unload is None else library_pool(
        data_dir(), parallel=parallel, queue_limit=queue_limit, n_ctx=n_ctx, n_threads=n_threads,
        default_ttl=idle_unload, exactness=exactness)
    server = LocalServer(port=port, api_key=api_key, cors_origins=cors_origins, pool=pool, defaults=_defaults(),
                         max_queue_wait=max_queue_wait, **exposure(data_dir(), listen, tls_cert, tls_key, rate_limit))
    gpu_layers: Literal["all"] | Auto = "all" if rpc else AUTO  # RPC workers' devices take every layer
    if rpc:
        from ..backends.llama.rpc import add_worker

        for endpoint in rpc:
            print(f"worker {endpoint}: {', '.join(add_worker(endpoint))}", file=sys.stderr, flush=True)
    print("loading model...", file=sys.stderr, flush=True)
    # The plan counts the pool the scheduler makes: ``parallel`` sequences of the context.
    if request is not None:
        req = replace(request, server_parallel=parallel, workers=())
    else:
        req = LoadSpec(model=model or "bundled", context=or_auto(n_ctx), n_threads=or_auto(n_threads),
                       server_parallel=parallel, mmproj=or_auto(mmproj), gpu_layers=gpu_layers,
                       exactness=exactness or default_exactness(), draft=draft)
    loaded = load_model(req, data_dir=data_dir(), n_threads=n_threads)
    m = loaded.model
    assert m is not None  # load_model describes what it loaded
    _say_loaded(m, machine_line=request is not None)
    engine = loaded.engine
    scheduler = Scheduler(engine, parallel=parallel, queue_limit=queue_limit, window=False)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Ctrl-C stops even where the parent ignored SIGINT (a background job of a script): Python then leaves it ignored.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        server.attach(scheduler)
        server.start()
        settle()  # what the load left alive goes out of the cyclic GC's reach (quiet_gc.py)
        key = " (API key required)" if api_key or server.exposed else ""
        if server.tls is not None:
            print(f"TLS certificate fingerprint {fingerprint_text(server.tls.fingerprint())}: a client that "
                  "pins another refuses this server", file=sys.stderr, flush=True)
        if request is not None:  # a parent process's: where to reach the model, as one JSON line
            print(READY + json.dumps({"url": server.url, "model": server.model_id}), flush=True)
        # stdout, one line: people, scripts (and the tests) read the address from it.
        print(f"Hearth serving {server.model_id} at {server.url}{key}; Ctrl-C stops", flush=True)
        try:
            while not stop.wait(0.5) and server.running:
                pass
        except KeyboardInterrupt:
            pass
        print("stopping...", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        with bounded_shutdown():
            server.detach("the server is stopping")
            server.stop()
            scheduler.close()
            engine.close()
    return 0

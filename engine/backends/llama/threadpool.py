"""llama.cpp's CPU thread pool through our own ctypes, and the thread options Hearth measures.

llama-cpp-python 0.3.36 leaves ``llama_attach_threadpool`` unbound and binds no
``ggml_threadpool_*`` function, but they are plain C exports of the libraries it
ships. Without a pool of its own, ggml makes a throw-away one for every graph
(every token); with one attached, the same workers serve every graph, and the
pool's ``poll`` level (0-100) says how long an idle worker spins for new work
before it sleeps on a condition variable (ggml's default is 50; 0 sleeps at once,
so between tokens the workers leave the cores to the window).

Caveat, read from ggml-cpu.c: a build with OpenMP (:func:`openmp`; the Linux
wheel here links libgomp) runs every graph in an ``omp parallel`` region and
its barriers as ``omp barrier``, so ``poll`` changes nothing there: libgomp's
own OMP_WAIT_POLICY / GOMP_SPINCOUNT (read once, when libgomp loads) decide how
its threads wait. Barriers inside a graph spin in either build.

Where the symbols come from: ``ggml_threadpool_params_*`` live in libggml-base,
``ggml_threadpool_new/free/pause/resume`` in libggml-cpu, the attach functions in
libllama. They are looked up through llama-cpp-python's own libllama handle
(dlsym searches a library's dependencies), so they are the copies llama.cpp
itself runs, never a second copy of a library loaded beside it; ``new``/``free``
are taken from the CPU backend's ``get_proc_address`` (as llama.cpp's tools do),
and must be the same functions. The struct layout is checked against ggml before
the first use (:func:`check_layout`). Importing this module loads nothing.
"""
from __future__ import annotations

import ctypes
import os
import threading
from types import SimpleNamespace
from typing import Any, NamedTuple

from ...errors import HearthError

GGML_MAX_N_THREADS = 512      # ggml.h of the llama.cpp vendored by llama-cpp-python 0.3.36
POLL_DEFAULT = 50             # ggml_threadpool_params_init's poll level
_CPU_DEVICE = 0               # enum ggml_backend_dev_type: GGML_BACKEND_DEVICE_TYPE_CPU


class ThreadpoolParams(ctypes.Structure):
    """struct ggml_threadpool_params (ggml.h): 528 bytes on every ABI with 4-byte ints and enums."""
    _fields_ = [("cpumask", ctypes.c_bool * GGML_MAX_N_THREADS),  # all false: the inherited affinity
                ("n_threads", ctypes.c_int),
                ("prio", ctypes.c_int),         # enum ggml_sched_priority; 0 = normal
                ("poll", ctypes.c_uint32),      # 0: no polling ... 100: aggressive polling
                ("strict_cpu", ctypes.c_bool),
                ("paused", ctypes.c_bool)]


# -- the thread options -------------------------------------------------------

class ThreadChoice(NamedTuple):
    """Threads for llama.cpp, and the poll level of Hearth's own pool (None: no pool, ggml's default)."""
    n_threads: int
    poll: int | None


# "cores-1": the physical cores less one, llama.cpp's own way (today's default in the window);
# "all": every physical core; "all-poll0": every core, with our pool at poll 0.
THREAD_OPTIONS = ("cores-1", "all", "all-poll0")


def default_threads() -> int:
    """The physical cores (all CPUs where psutil cannot tell)."""
    try:
        import psutil
        n = psutil.cpu_count(logical=False)
    except Exception:  # psutil missing or unsupported platform
        n = None
    return max(1, n or os.cpu_count() or 1)


def thread_option(name: str, cores: int | None = None) -> ThreadChoice:
    """The threads and poll level of one of THREAD_OPTIONS on ``cores`` physical cores (default: this machine's)."""
    n = cores or default_threads()
    if name == "cores-1":
        return ThreadChoice(max(1, n - 1), None)
    if name == "all":
        return ThreadChoice(n, None)
    if name == "all-poll0":
        return ThreadChoice(n, 0)
    raise HearthError(f"unknown thread option {name!r}; choose one of {', '.join(THREAD_OPTIONS)}")


def check_poll(poll: Any) -> int:
    """``poll`` as llama.cpp's poll level, or HearthError saying what is allowed."""
    if isinstance(poll, bool) or not isinstance(poll, int) or not 0 <= poll <= 100:
        raise HearthError(f"threads_poll: must be a whole number from 0 (no polling) to 100 "
                          f"(aggressive polling), got {poll!r}")
    return poll


# -- the C functions ------------------------------------------------------------

_lock = threading.Lock()
_api: SimpleNamespace | None = None


def _fn(addr: int | None, res: Any, *args: Any) -> Any:
    return ctypes.CFUNCTYPE(res, *args)(addr) if addr else None


def _address(f: Any) -> int | None:
    return ctypes.cast(f, ctypes.c_void_p).value


def check_layout(init: Any) -> None:
    """Check ThreadpoolParams against ggml's own ``ggml_threadpool_params_init``.

    init() zeroes exactly GGML_MAX_N_THREADS mask bytes and sets each field; run on
    a buffer four times our struct's size filled with a marker byte, it shows where
    ggml's fields are and that it writes nothing past ours (a bigger
    GGML_MAX_N_THREADS or another field order would show here, before any call
    that could write past a buffer)."""
    size = ctypes.sizeof(ThreadpoolParams)
    buf = (ctypes.c_ubyte * (4 * size))(*([0xA5] * (4 * size)))
    init(ctypes.cast(buf, ctypes.POINTER(ThreadpoolParams)), 7)
    raw = bytes(buf)
    p = ThreadpoolParams.from_buffer_copy(raw[:size])
    problems = []
    if any(raw[:GGML_MAX_N_THREADS]):
        problems.append("the CPU mask is not the first GGML_MAX_N_THREADS bytes")
    if (p.n_threads, p.prio, p.poll, p.strict_cpu, p.paused) != (7, 0, POLL_DEFAULT, False, False):
        problems.append(f"fields read back as n_threads={p.n_threads}, prio={p.prio}, poll={p.poll}, "
                        f"strict_cpu={p.strict_cpu}, paused={p.paused}")
    end = ThreadpoolParams.paused.offset + 1
    if any(b != 0xA5 for b in raw[end:]):
        problems.append(f"ggml wrote past byte {end}")
    if problems:
        raise HearthError("this llama.cpp build's ggml_threadpool_params does not match Hearth's "
                          f"(GGML_MAX_N_THREADS {GGML_MAX_N_THREADS}, {size} bytes): {'; '.join(problems)}")


def api() -> SimpleNamespace:
    """The thread-pool functions, declared and checked once (HearthError where this build lacks them)."""
    global _api
    if _api is not None:
        return _api
    with _lock:
        if _api is None:
            _api = _declare()
    return _api


def _declare() -> SimpleNamespace:
    from llama_cpp import llama_cpp as lcpp

    from . import init
    init()  # the backends are registered: the CPU backend's proc addresses are there
    lib = lcpp._lib  # llama-cpp-python's libllama handle: dlsym searches its ggml libraries too
    vp, P = ctypes.c_void_p, ctypes.POINTER(ThreadpoolParams)

    def sym(name: str, res: Any = None, *args: Any) -> Any:
        try:
            f = lib[name]  # a function object of our own: llama_cpp's declarations stay as they are
        except AttributeError:
            return None
        f.argtypes, f.restype = list(args), res
        return f

    missing = [n for n in ("ggml_threadpool_params_init", "llama_attach_threadpool", "llama_detach_threadpool",
                           "ggml_backend_dev_by_type", "ggml_backend_dev_backend_reg",
                           "ggml_backend_reg_get_proc_address") if sym(n) is None]
    if missing:
        raise HearthError(f"this llama.cpp build has no thread-pool API ({', '.join(missing)} missing)")
    init_fn = sym("ggml_threadpool_params_init", None, P, ctypes.c_int)
    check_layout(init_fn)
    by_type = sym("ggml_backend_dev_by_type", vp, ctypes.c_int)
    dev_reg = sym("ggml_backend_dev_backend_reg", vp, vp)
    get_proc = sym("ggml_backend_reg_get_proc_address", vp, vp, ctypes.c_char_p)
    dev = by_type(_CPU_DEVICE)
    reg = dev_reg(dev) if dev else None

    def proc(name: str) -> int | None:
        return get_proc(reg, name.encode()) if reg else None

    new_at, free_at = proc("ggml_threadpool_new"), proc("ggml_threadpool_free")
    if not new_at or not free_at:
        raise HearthError("this llama.cpp build's CPU backend offers no thread pool")
    for name, at in (("ggml_threadpool_new", new_at), ("ggml_threadpool_free", free_at)):
        direct = sym(name)
        if direct is not None and _address(direct) != at:
            raise HearthError(f"two copies of ggml's CPU backend are loaded ({name} differs); "
                              "Hearth will not mix their thread pools")
    pause, resume = sym("ggml_threadpool_pause", None, vp), sym("ggml_threadpool_resume", None, vp)
    features = _fn(proc("ggml_backend_get_features"), vp, vp)
    return SimpleNamespace(
        params_init=init_fn, params_default=sym("ggml_threadpool_params_default", ThreadpoolParams, ctypes.c_int),
        params_match=sym("ggml_threadpool_params_match", ctypes.c_bool, P, P),
        new=_fn(new_at, vp, P), free=_fn(free_at, None, vp),
        pause=pause, resume=resume,
        attach=sym("llama_attach_threadpool", None, vp, vp, vp), detach=sym("llama_detach_threadpool", None, vp),
        n_threads=sym("llama_n_threads", ctypes.c_int32, vp),
        n_threads_batch=sym("llama_n_threads_batch", ctypes.c_int32, vp),
        features=features, reg=reg, new_at=new_at)


class _Feature(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]


def cpu_features() -> dict[str, str]:
    """The CPU backend's build features (``OPENMP``, ``AVX2``, ...) as ggml reports them."""
    a = api()
    if a.features is None:
        return {}
    out: dict[str, str] = {}
    ptr = ctypes.cast(a.features(a.reg), ctypes.POINTER(_Feature))
    i = 0
    while ptr and ptr[i].name is not None:
        out[ptr[i].name.decode()] = (ptr[i].value or b"").decode()
        i += 1
    return out


def openmp() -> bool:
    """True when ggml's CPU backend was built with OpenMP (the pool's poll level is then unused)."""
    return "OPENMP" in cpu_features()


# -- the pool ---------------------------------------------------------------------

def _ctx_key(ctx: Any) -> int:
    key = _address(ctx)
    if not key:
        raise HearthError("no llama.cpp context to attach the thread pool to")
    return key


class ThreadPool:
    """One ggml CPU thread pool of ``n_threads`` workers at poll level ``poll``.

    Attach it to the llama.cpp contexts it serves (their threads must not exceed
    the pool's: an OpenMP build would index past its workers). ggml's CPU backend
    keeps a context's pool pointer until the context computes again or is freed,
    so a pool is freed after the contexts it served: detach, ``llama_free`` the
    context, then :meth:`free` (LlamaCppBackend.close does this). ``free`` refuses
    while a context is attached; a pool dropped while attached is left alone
    rather than freed under a live context."""

    def __init__(self, n_threads: int, poll: int, *, paused: bool = False) -> None:
        if isinstance(n_threads, bool) or not isinstance(n_threads, int) or not 1 <= n_threads <= GGML_MAX_N_THREADS:
            raise HearthError(f"a thread pool needs 1 to {GGML_MAX_N_THREADS} threads, got {n_threads!r}")
        self.poll = check_poll(poll)
        self.n_threads = n_threads
        self._attached: dict[int, Any] = {}
        self._handle: int | None = None
        a = api()
        params = ThreadpoolParams()
        a.params_init(ctypes.byref(params), n_threads)
        params.poll, params.paused = self.poll, paused
        handle = a.new(ctypes.byref(params))
        if not handle:
            raise HearthError(f"llama.cpp could not start a pool of {n_threads} threads")
        self._handle = handle

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise HearthError("the thread pool has been freed")
        return self._handle

    @property
    def freed(self) -> bool:
        return self._handle is None

    @property
    def attached(self) -> int:
        """How many contexts the pool is attached to."""
        return len(self._attached)

    def attach(self, ctx: Any) -> None:
        """Run ``ctx``'s graphs (token steps and batches) on this pool."""
        key, handle, a = _ctx_key(ctx), self.handle, api()
        need = max(a.n_threads(ctx), a.n_threads_batch(ctx)) if a.n_threads is not None else self.n_threads
        if need > self.n_threads:
            raise HearthError(f"the context runs {need} threads but the pool has {self.n_threads}")
        a.attach(ctx, handle, handle)
        self._attached[key] = ctx

    def detach(self, ctx: Any) -> None:
        """Give ``ctx`` back to ggml's own per-graph threads (see the class note before freeing)."""
        key = _ctx_key(ctx)
        if key in self._attached:
            api().detach(ctx)
            del self._attached[key]

    def pause(self) -> None:
        self._call("pause")

    def resume(self) -> None:
        self._call("resume")

    def _call(self, what: str) -> None:
        f = getattr(api(), what)
        if f is None:
            raise HearthError(f"this llama.cpp build cannot {what} a thread pool")
        f(self.handle)

    def free(self) -> None:
        """Stop and free the workers (idempotent); HearthError while a context is attached."""
        if self._handle is None:
            return
        if self._attached:
            raise HearthError(f"the thread pool is attached to {len(self._attached)} context(s); detach it first")
        handle, self._handle = self._handle, None
        api().free(handle)

    def __enter__(self) -> "ThreadPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __del__(self) -> None:
        try:
            if self._handle is not None and not self._attached:
                self.free()
        except Exception:  # interpreter shutdown: ctypes may already be gone
            pass

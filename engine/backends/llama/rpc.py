"""llama.cpp's RPC backend: workers that make another process's (or machine's) device one more device here.

A worker (``python -m engine worker``) runs ``ggml_backend_rpc_start_server`` on one
of its machine's devices; a client registers a worker's endpoint before a model
loads, and its devices appear as ``RPC0``... before the local GPUs (``tensor_split``
indexes that order). Registration is process-wide and a failed RPC call aborts the
process (GGML_ABORT), so:
- an endpoint is checked here first, in Python, with the protocol's own HELLO
  (``probe_worker``): a closed port, a port that is not a worker, or a worker of another
  protocol version is a HearthError, never an abort;
- a model that uses workers runs in a child process (the remote engine's client
  talks to it), so a worker lost mid-reply cannot take the window with it.

The RPC server has no authentication and no encryption (llama.cpp says never to
expose it): a worker binds 127.0.0.1 unless told otherwise, and another machine's
worker is reached through an SSH tunnel.
"""
from __future__ import annotations

import ctypes
import functools
import socket
import struct
import threading
from dataclasses import dataclass

from ...errors import HearthError

PROTO_MAJOR, PROTO_MINOR = 7, 0   # ggml-rpc.h's RPC_PROTO_*_VERSION in the llama.cpp this wheel carries
CMD_HELLO = 14                    # RPC_CMD_HELLO, fixed across versions ("must be always 14")
CMD_GET_DEVICE_MEMORY, CMD_DEVICE_COUNT = 11, 15  # enum rpc_cmd in ggml-rpc.cpp (protocol 7)
CONN_CAPS = 24                    # RPC_CONN_CAPS_SIZE (transport.h): all zero asks for plain TCP
DEFAULT_PORT = 50052              # rpc-server's


@dataclass(frozen=True, slots=True)
class Version:
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def probe_worker(endpoint: str, timeout: float = 3.0) -> Version:
    """The protocol version a worker at ``host:port`` speaks, by its HELLO. Raises HearthError
    (never aborts) for a closed port, a silent one, one that is not a worker, or a version this
    build's client would refuse."""
    return _ask(endpoint, timeout, lambda s: None)[0]


def worker_memory(endpoint: str, timeout: float = 3.0) -> list[tuple[int, int]]:
    """(free, total) bytes of each device the worker at ``endpoint`` serves, asked as llama.cpp's client
    asks (DEVICE_COUNT, then GET_DEVICE_MEMORY per device), without registering anything here."""
    def ask(s: socket.socket) -> list[tuple[int, int]]:
        (count,) = struct.unpack("<I", _command(s, CMD_DEVICE_COUNT, b"", 4))
        return [struct.unpack("<QQ", _command(s, CMD_GET_DEVICE_MEMORY, struct.pack("<I", i), 16))
                for i in range(min(count, 16))]
    return _ask(endpoint, timeout, ask)[1]


def _command(s: socket.socket, cmd: int, payload: bytes, size: int) -> bytes:
    """One request (| cmd u8 | size u64 | payload |) and its fixed-size answer (| size u64 | data |)."""
    s.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    (n,) = struct.unpack("<Q", _exactly(s, 8))
    if n != size:
        raise OSError(f"an answer of {n} bytes, not {size}")
    return _exactly(s, n)


def _ask(endpoint: str, timeout: float, then):
    """Connect, HELLO (the version check), then ``then(socket)``: (version, its result)."""
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise HearthError(f"a worker's address is host:port, not {endpoint!r}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
            s.sendall(struct.pack("<BQ", CMD_HELLO, CONN_CAPS) + bytes(CONN_CAPS))
            head = _exactly(s, 8)
            (size,) = struct.unpack("<Q", head)
            if size != 4 + CONN_CAPS:
                raise HearthError(f"{endpoint} answered, but not as a llama.cpp RPC worker of protocol "
                                  f"{PROTO_MAJOR}.x (its HELLO reply is {size} bytes)")
            body = _exactly(s, size)
            v = Version(body[0], body[1], body[2])
            if v.major != PROTO_MAJOR or v.minor > PROTO_MINOR:
                raise HearthError(f"the worker at {endpoint} speaks RPC protocol {v}; this Hearth speaks "
                                  f"{PROTO_MAJOR}.{PROTO_MINOR}: start the worker from the same Hearth version")
            return v, then(s)
    except (ConnectionRefusedError, socket.gaierror) as e:
        raise HearthError(f"no worker at {endpoint}: {e.strerror or e}") from None
    except (TimeoutError, socket.timeout):
        raise HearthError(f"{endpoint} did not answer within {timeout:.0f} s: is it a llama.cpp RPC worker, and not "
                          "busy with another Hearth's model? (a worker serves one at a time)") from None
    except OSError as e:
        raise HearthError(f"{endpoint} closed the connection: is it a llama.cpp RPC worker? ({e})") from None


def _exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise OSError("the connection ended")
        out += chunk
    return out


_lock = threading.Lock()
_added: dict[str, list[str]] = {}


@functools.cache
def _lib():
    """The registry functions, declared once, on libllama's handle (the ggml llama.cpp loads with)."""
    from llama_cpp import llama_cpp as lcpp

    from . import init

    init()
    lib = lcpp._lib
    vp = ctypes.c_void_p

    def sym(name: str, res, *args):
        f = lib[name]
        f.argtypes, f.restype = list(args), res
        return f

    return {"reg_by_name": sym("ggml_backend_reg_by_name", vp, ctypes.c_char_p),
            "get_proc": sym("ggml_backend_reg_get_proc_address", vp, vp, ctypes.c_char_p),
            "register": sym("ggml_backend_register", None, vp),
            "dev_count": sym("ggml_backend_reg_dev_count", ctypes.c_size_t, vp),
            "dev_get": sym("ggml_backend_reg_dev_get", vp, vp, ctypes.c_size_t),
            "dev_name": sym("ggml_backend_dev_name", ctypes.c_char_p, vp)}


def _rpc_function(name: str, ctype):
    """The RPC backend's ``name`` as ``ctype``; HearthError on a build without the backend."""
    api = _lib()
    rpc = api["reg_by_name"](b"RPC")
    if not rpc:
        raise HearthError("this llama.cpp build has no RPC backend: set-up builds every runtime with it")
    return ctype(api["get_proc"](rpc, name.encode()))


def rpc_available() -> bool:
    """Whether this build has the RPC backend."""
    try:
        return bool(_lib()["reg_by_name"](b"RPC"))
    except (AttributeError, HearthError):
        return False


def add_worker(endpoint: str) -> list[str]:
    """Register the worker at ``endpoint`` (probed first) in this process; the names of the devices it
    adds (``RPC0``...). Process-wide and for good: call it before the model that uses it loads."""
    with _lock:
        if endpoint in _added:
            return _added[endpoint]
        probe_worker(endpoint)
        api = _lib()
        add = _rpc_function("ggml_backend_rpc_add_server", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p))
        reg = add(endpoint.encode())
        if not reg:
            raise HearthError(f"llama.cpp could not add the worker at {endpoint}")
        api["register"](reg)
        names = [(api["dev_name"](api["dev_get"](reg, i)) or b"").decode() for i in range(api["dev_count"](reg))]
        _added[endpoint] = names
        return names


def serve_worker(host: str, port: int, *, device: str | None = None, threads: int = 0,
                 cache_dir: str | None = None) -> None:
    """Run a worker on this machine's ``device`` (default: its first GPU, else the CPU) at ``host:port``;
    never returns. Bind anything but loopback only when the caller has said so (engine/cli/worker.py)."""
    from .devices import _ggml, list_devices

    start = _rpc_function("ggml_backend_rpc_start_server", ctypes.CFUNCTYPE(
        None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)))
    devices = list_devices()
    chosen = [d for d in devices if d.name == device] if device else (
        [d for d in devices if d.type in ("gpu", "igpu") and not d.name.startswith("RPC")][:1]
        or [d for d in devices if d.type == "cpu"][:1])
    if not chosen:
        raise HearthError(f"no device {device!r} here; this machine has {', '.join(d.name for d in devices)}")
    dev = _ggml().ggml_backend_dev_get(chosen[0].index)
    arr = (ctypes.c_void_p * 1)(dev)
    start(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None, threads, 1, arr)

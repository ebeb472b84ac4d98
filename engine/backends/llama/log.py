"""llama.cpp's log, captured, and the errors read from it.

llama.cpp logs through one process-wide callback, set here once. Both llama.cpp
contexts (the backend's, ``backend.py``, and the batch one, ``batch.py``)
read it: a failed load or decode says *why* from the lines it logged, and
memory_report() reads the buffer sizes llama.cpp prints when it allocates them.
"""
from __future__ import annotations

import ctypes
import logging
import re
import threading
from collections import deque
from typing import Sequence

import llama_cpp as lc

from ...errors import HearthError
from . import devices

log = logging.getLogger("hearth.llama_cpp")

# The recent lines, with a running count so a caller can take only its own (_log_mark/_log_since).
_LOG_LINES: deque[str] = deque(maxlen=2000)
_LOG_LOCK = threading.Lock()
_LOG_SEQ = [0]


@lc.llama_log_callback
def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    line = text.decode("utf-8", errors="replace")
    with _LOG_LOCK:
        _LOG_LINES.append(line)
        _LOG_SEQ[0] += 1
    # Debug level on purpose: failures reach the user as one clear HearthError
    # built from these lines, not as raw C log noise on stderr.
    if line.strip():
        log.debug("%s", line.rstrip())


def install() -> None:
    """Route llama.cpp's log to _on_log (``init()`` calls it before the backend starts)."""
    lc.llama_log_set(_on_log, ctypes.c_void_p(0))


def _log_mark() -> int:
    with _LOG_LOCK:
        return _LOG_SEQ[0]


def _log_since(mark: int) -> list[str]:
    with _LOG_LOCK:
        n = _LOG_SEQ[0] - mark
        return list(_LOG_LINES)[-n:] if n > 0 else []


# Where an allocation failed, as ggml logs it: ggml-alloc's "failed to allocate Vulkan0 buffer of
# size N" (weights, KV and compute buffers alike, any backend), CUDA's "cudaMalloc failed", and
# Metal's "error: failed to allocate buffer, size = N MiB".
_ALLOC_FAIL_RE = re.compile(r"failed to allocate (\S+) buffer of size|(cudaMalloc) failed|"
                            r"(ggml_metal)\w*: error: failed to allocate buffer")
_ALLOC_NAMES = {"cudaMalloc": "CUDA", "ggml_metal": "Metal"}


def failed_allocation_device(lines: Sequence[str]) -> str | None:
    """The device an allocation failed on in ``lines`` ("Vulkan0", "CUDA0", "CUDA", "CPU"),
    or None when the log names no failed allocation. A device buffer's name wins over a host one."""
    found: list[str] = []
    for line in lines:
        for groups in _ALLOC_FAIL_RE.findall(line):
            name = next(g for g in groups if g)
            found.append(_ALLOC_NAMES.get(name, name))
    on_device = [d for d in found if devices.runtime_of(d) != "cpu"]
    named = [d for d in on_device if d[-1:].isdigit()]  # "CUDA1" says more than cudaMalloc's "CUDA"
    return (named or on_device or found)[0] if found else None


def out_of_memory_text(lines: Sequence[str]) -> str:
    """"not enough memory on Vulkan0" / "not enough memory" for a failure's log lines: the
    device's name is what tells the retry to shrink the GPU's share, not the RAM's."""
    dev = failed_allocation_device(lines)
    return f"not enough memory on {dev}" if dev and devices.runtime_of(dev) != "cpu" else "not enough memory"


def decode_error(rc: int, n_tokens: int, log_mark: int | None = None) -> HearthError:
    """The error for a failed llama_decode (not 1, no KV room, or 2, aborted, which callers raise).
    ``log_mark``: :func:`_log_mark` taken just before the call, so only its own log lines count."""
    if rc == -2:  # GGML_STATUS_ALLOC_FAILED: the compute or output buffers could not grow
        lines = _log_since(log_mark) if log_mark is not None else []
        return HearthError(f"{out_of_memory_text(lines)} to compute a batch of {n_tokens} tokens "
                           f"(llama_decode returned {rc})")
    if rc == -3:  # GGML_STATUS_FAILED: the backend's compute failed (on a GPU: a reset, a lost device)
        return HearthError(f"the device failed to compute a batch of {n_tokens} tokens (llama_decode returned -3)")
    return HearthError(f"llama_decode failed with code {rc}")


_BUF_RE = re.compile(r"(\S+)\s+(model|KV|compute|output|RS)\s+buffer size\s*=\s*([\d.]+)\s*MiB")
_N_SEQ_RE = re.compile(r"llama_context:\s+n_seq_max\s*=\s*(\d+)")


def parse_buffer_sizes(lines: Sequence[str]) -> dict[str, int]:
    """Sum the 'X buffer size = N MiB' lines llama.cpp prints, by kind, in bytes.

    Keys: weights, kv, compute, output, recurrent; plus ``<kind>@<device>``
    entries so a GPU/CPU split can be checked part by part; and ``n_seq``, the
    sequences the context was opened for (its KV streams), where the lines say.
    """
    names = {"model": "weights", "KV": "kv", "compute": "compute", "output": "output", "RS": "recurrent"}
    out: dict[str, int] = {}
    for line in lines:
        m = _N_SEQ_RE.search(line)
        if m:
            out["n_seq"] = out.get("n_seq", 0) + int(m.group(1))
        for dev, kind, mib in _BUF_RE.findall(line):
            key = names[kind]
            b = int(float(mib) * 1024 * 1024)
            out[key] = out.get(key, 0) + b
            out[f"{key}@{dev}"] = out.get(f"{key}@{dev}", 0) + b
    return out


def load_failure(lines: Sequence[str], what: str, name: str) -> HearthError:
    """The error for a load that failed (``what``: "load the model", "create a 4096-token context"),
    read from llama.cpp's log lines: an unknown architecture, memory, or the last error line."""
    from ...errors import ModelLoadError, UnsupportedModelError

    text = "".join(lines)
    m = re.search(r"unknown model architecture: '([^']+)'", text)
    if m:
        return UnsupportedModelError(f"{name}: model architecture '{m.group(1)}' is not supported by this "
                                     "llama.cpp build")
    errors = [ln.strip() for ln in lines if ln.strip() and ("error" in ln.lower() or "failed" in ln.lower())]
    detail = errors[-1] if errors else "no details from llama.cpp"
    if re.search(r"alloc|out of memory|cannot allocate", text, re.I):
        return ModelLoadError(f"{out_of_memory_text(lines)} to {what} for {name} ({detail})")
    return ModelLoadError(f"llama.cpp could not {what} for {name}: {detail}")

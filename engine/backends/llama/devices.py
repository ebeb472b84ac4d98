"""The devices llama.cpp's ggml can compute on, their memory, and the runtime set-up chose.

llama-cpp-python 0.3.36 binds none of ggml's device functions, but they are
plain C exports of the libggml it ships (``llama_cpp._ggml.libggml``), so they
are declared here through ctypes. This file imports only the standard library
at module level: scripts/probe_llama.py loads it by path before the engine is
installed.

Three questions answered here:
- which devices ggml sees, with free and total memory (:func:`list_devices`);
- where a loaded model's layers went, from llama.cpp's load log (:func:`placement`);
- what scripts/setup.py built and why, for the window (:func:`setup_runtime`).
"""
from __future__ import annotations

import ctypes
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

STAMP_NAME = ".hearth-setup.json"
# enum ggml_backend_dev_type (ggml-backend.h)
DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
# ggml device names -> the runtime that computes there ("CUDA0", "Vulkan1", "MTL0"/"Metal", "ROCm0")
_RUNTIME_PREFIXES = (("cuda", "cuda"), ("vulkan", "vulkan"), ("mtl", "metal"), ("metal", "metal"),
                     ("rocm", "rocm"), ("hip", "rocm"), ("sycl", "sycl"), ("opencl", "opencl"), ("rpc", "rpc"))
_OFFLOADED_RE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER_DEV_RE = re.compile(r"(\S+)\s+(?:model|KV|compute|output|RS)\s+buffer size\s*=")


@dataclass(slots=True, frozen=True)
class Device:
    """One ggml device: ``name`` as llama.cpp logs it ("Vulkan0", "CUDA0", "CPU")."""
    index: int
    name: str
    description: str
    type: str        # "cpu", "gpu", "igpu", "accel"
    free: int        # bytes, when asked
    total: int       # bytes

    @property
    def runtime(self) -> str:
        return runtime_of(self.name)

    @property
    def is_gpu(self) -> bool:
        return self.type in ("gpu", "igpu")


def runtime_of(device_name: str) -> str:
    """'Vulkan0' -> 'vulkan', 'CUDA1' -> 'cuda', 'MTL0' -> 'metal', 'RPC0[10.0.0.5:50052]' (a worker) -> 'rpc';
    host buffers -> 'cpu'."""
    low = device_name.lower()
    for prefix, runtime in _RUNTIME_PREFIXES:
        if low.startswith(prefix) and not low.endswith("_host"):
            return runtime
    return "cpu"


_lib = None


def _ggml():
    """libggml with the device functions declared (once)."""
    global _lib
    if _lib is None:
        from llama_cpp import llama_cpp as lcpp

        # libllama's own handle: dlsym searches the libggml it links. llama_cpp._ggml loads lib/libggml.so,
        # which a wheel ships as a copy (wheels hold no symlinks) of libggml.so.0: a second ggml with its own
        # registry, which never sees an RPC worker registered for llama.cpp's loads.
        lib = lcpp._lib
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for fn, args, res in (("ggml_backend_dev_count", [], sz), ("ggml_backend_dev_get", [sz], vp),
                              ("ggml_backend_dev_name", [vp], ctypes.c_char_p),
                              ("ggml_backend_dev_description", [vp], ctypes.c_char_p),
                              ("ggml_backend_dev_type", [vp], ctypes.c_int),
                              ("ggml_backend_dev_memory", [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)], None)):
            f = getattr(lib, fn)
            f.argtypes, f.restype = args, res
        _lib = lib
    return _lib


def list_devices() -> list[Device]:
    """Every device ggml registered in this process, with its memory now.

    On a CPU-only build that is just "CPU" (system RAM). A Vulkan device of
    type CPU (Mesa's lavapipe) is only listed when GGML_VK_VISIBLE_DEVICES
    names it before llama.cpp starts. Inside Hearth, call ``engine.backends.llama.init()``
    first, so that the lines ggml logs while it registers its devices are captured."""
    lib = _ggml()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(Device(i, (lib.ggml_backend_dev_name(dev) or b"").decode(errors="replace"),
                          (lib.ggml_backend_dev_description(dev) or b"").decode(errors="replace"),
                          DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "unknown"),
                          int(free.value), int(total.value)))
    return out


def gpu_devices() -> list[Device]:
    """The devices llama.cpp offloads layers to, in its order (``tensor_split`` indexes it): RPC workers
    first, then the GPUs, then integrated GPUs only where there is no other GPU (src/llama.cpp)."""
    devs = [d for d in list_devices() if d.is_gpu]
    rpc = [d for d in devs if d.runtime == "rpc"]
    gpus = [d for d in devs if d.runtime != "rpc" and d.type == "gpu"]
    return rpc + (gpus or [d for d in devs if d.runtime != "rpc" and d.type == "igpu"])


def memory_entries(devices: Iterable[Device] | None = None) -> dict[str, int]:
    """``device_free:<name>`` and ``device_total:<name>`` in bytes, for memory details.

    Kept out of ``memory_report()`` on purpose: its keys are llama.cpp's own
    buffers, which the planner's comparison and the window's total sum up."""
    out: dict[str, int] = {}
    for d in list_devices() if devices is None else devices:
        out[f"device_free:{d.name}"] = d.free
        out[f"device_total:{d.name}"] = d.total
    return out


@dataclass(slots=True, frozen=True)
class DevicePlacement:
    """Where a loaded model runs: ``runtime`` "cpu"/"vulkan"/"cuda"/"metal", ``device``
    "CPU", "Vulkan0" (every layer there) or "Vulkan0+CPU" (some layers on the CPU)."""
    runtime: str
    device: str
    layers_offloaded: int = 0
    layers_total: int = 0


def placement(log_lines: Iterable[str]) -> DevicePlacement:
    """Read where the layers went from llama.cpp's load log: its
    "offloaded k/n layers to GPU" line and the device names of its buffers."""
    k = n = 0
    gpus: list[str] = []
    for line in log_lines:
        m = _OFFLOADED_RE.search(line)
        if m:
            k, n = int(m.group(1)), int(m.group(2))
        for name in _BUFFER_DEV_RE.findall(line):
            if runtime_of(name) != "cpu" and name not in gpus:
                gpus.append(name)
    if k == 0 or not gpus:
        return DevicePlacement("cpu", "CPU", 0, n)
    device = "+".join(gpus) + ("+CPU" if k < n else "")
    return DevicePlacement(runtime_of(gpus[0]), device, k, n)


@dataclass(slots=True, frozen=True)
class SetupRuntime:
    """What scripts/setup.py built for this environment: the window shows
    ``runtime`` and, when a better runtime was given up, ``fallbacks`` (one
    sentence each, with the reason)."""
    runtime: str
    flavour: str
    why: str
    device: str
    fallbacks: tuple[str, ...]


def setup_runtime(prefix: str | Path | None = None) -> SetupRuntime | None:
    """Set-up's record for the environment at ``prefix`` (default: this one), or
    None where there is none (a packaged app, or a venv older than the record)."""
    stamp = Path(prefix or sys.prefix) / STAMP_NAME
    try:
        rec = json.loads(stamp.read_text()).get("llama") or {}
    except (OSError, ValueError, AttributeError):
        return None
    if not rec.get("runtime"):
        return None
    return SetupRuntime(rec["runtime"], rec.get("flavour", ""), rec.get("why", ""), rec.get("device", ""),
                        tuple(rec.get("fallbacks", ())))

"""What this machine has to run a model on: GPUs, system RAM, CPU cores.

The probe is cheap and never imports torch on its own: the GGUF path must
start without it. NVIDIA GPUs are read through NVML (``nvidia-ml-py``, an
optional pure-Python package) or, without it, ``nvidia-smi``; AMD GPUs
through the amdgpu driver's sysfs files; torch (CUDA or ROCm) is asked only
when it is already imported or the caller is about to use it anyway
(``allow_torch=True``, the transformers backend). Apple silicon shares one
memory between CPU and GPU; its GPU is reported as ``unified``.

Tests and ``python -m engine plan --gpu 8GiB --ram 16GiB`` inject a
simulated machine with :func:`simulated`, so plans are reproducible.

This module imports nothing from the engine: set-up (scripts/runtimes.py)
loads it by file path, before any virtual environment exists.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

GiB = 1024 ** 3
MiB = 1024 ** 2


@dataclass(slots=True, frozen=True)
class GPU:
    index: int
    name: str
    vendor: str          # "nvidia", "amd", "apple" or "simulated"
    total: int           # bytes
    free: int            # bytes free when probed (other programs' use excluded)
    unified: bool = False  # memory shared with the CPU (Apple silicon)
    device: str = ""       # ggml's name for it when llama.cpp listed it ("Vulkan0", "RPC0"); "" otherwise


@dataclass(slots=True, frozen=True)
class Hardware:
    gpus: tuple[GPU, ...]
    ram_total: int
    ram_available: int   # psutil's "available": free plus reclaimable page cache
    cpu_cores: int       # physical cores
    source: str = "probe"  # "probe" or "simulated"
    notes: tuple[str, ...] = field(default_factory=tuple)  # what the probe could not see, and why

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def unified(self) -> bool:
        return any(g.unified for g in self.gpus)

    def describe(self) -> str:
        """One line for people, e.g. 'NVIDIA RTX 4060 (7.6 of 8.0 GiB free), 31.2 GiB RAM available, 8 cores'."""
        parts = [f"{g.name} ({format_size(g.free)} of {format_size(g.total)} free"
                 f"{', shared with the CPU' if g.unified else ''})" for g in self.gpus]
        if not parts:
            parts.append("no GPU")
        parts.append(f"{format_size(self.ram_available)} of {format_size(self.ram_total)} RAM available")
        parts.append(f"{self.cpu_cores} CPU cores")
        sim = " [simulated]" if self.source == "simulated" else ""
        return ", ".join(parts) + sim

    def to_dict(self) -> dict:
        return {"gpus": [{"index": g.index, "name": g.name, "vendor": g.vendor, "total": g.total,
                          "free": g.free, "unified": g.unified} for g in self.gpus],
                "ram_total": self.ram_total, "ram_available": self.ram_available,
                "cpu_cores": self.cpu_cores, "source": self.source, "notes": list(self.notes)}


# -- sizes -----------------------------------------------------------------------

_UNITS = {"": GiB, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000 ** 2, "mb": 1000 ** 2,
          "mib": MiB, "g": GiB, "gb": 1000 ** 3, "gib": GiB, "t": 1024 ** 4, "tb": 1000 ** 4,
          "tib": 1024 ** 4}


def parse_size(text: str | int | float) -> int:
    """'8GiB' -> bytes. In text a bare number means GiB and 'G' is GiB (what GPU
    vendors mean by '8G'); 'GB' is 10**9. A Python number is already bytes.
    Raises ValueError with a readable message."""
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise ValueError(f"cannot read {text!r} as a memory size; write it like 8GiB, 512MiB or 16GB")
    return int(float(m.group(1)) * _UNITS[unit])


def format_size(n: float) -> str:
    """Bytes for people: '512 MiB', '4.03 GiB'."""
    if abs(n) < MiB:
        return f"{n / 1024:.0f} KiB" if abs(n) >= 1024 else f"{n:.0f} B"
    if abs(n) < GiB:
        return f"{n / MiB:.0f} MiB"
    return f"{n / GiB:.2f} GiB"


# -- probes ----------------------------------------------------------------------

def _nvml(notes: list[str]) -> list[GPU] | None:
    """NVIDIA through NVML. None if NVML is unavailable (then try nvidia-smi)."""
    try:
        import pynvml  # nvidia-ml-py; optional
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        # LibraryNotFound / DriverNotLoaded are the normal "no NVIDIA GPU" cases.
        if "NotFound" not in type(e).__name__ and "DriverNotLoaded" not in type(e).__name__:
            notes.append(f"NVML could not start ({e}); NVIDIA GPUs, if any, are not counted")
        return []
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            gpus.append(GPU(i, name, "nvidia", int(mem.total), int(mem.free)))
        return gpus
    except pynvml.NVMLError as e:
        notes.append(f"NVML failed while reading GPU memory ({e})")
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _nvidia_smi(notes: list[str]) -> list[GPU]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=index,name,memory.total,memory.free",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        notes.append(f"nvidia-smi failed ({e}); NVIDIA GPUs are not counted")
        return []
    gpus = []
    for line in out.strip().splitlines():
        try:
            idx, name, total, free = (s.strip() for s in line.split(","))
            gpus.append(GPU(int(idx), name, "nvidia", int(float(total) * MiB), int(float(free) * MiB)))
        except ValueError:
            notes.append(f"could not read nvidia-smi line {line!r}")
    return gpus


def _amd_sysfs(notes: list[str], root: Path = Path("/sys/class/drm")) -> list[GPU]:
    """AMD GPUs through the amdgpu driver's VRAM counters (Linux), no torch needed."""
    gpus: list[GPU] = []
    for card in sorted(root.glob("card[0-9]*")) if root.is_dir() else []:
        dev = card / "device"
        total_f, used_f = dev / "mem_info_vram_total", dev / "mem_info_vram_used"
        if not (total_f.is_file() and used_f.is_file()) or "-" in card.name:
            continue
        try:
            total, used = int(total_f.read_text()), int(used_f.read_text())
        except (OSError, ValueError) as e:
            notes.append(f"could not read {total_f.parent}: {e}")
            continue
        if total < 1 * GiB:  # an APU's small carve-out: llama.cpp will not offload to it usefully
            continue
        name = (dev / "product_name").read_text().strip() if (dev / "product_name").is_file() else "AMD GPU"
        gpus.append(GPU(len(gpus), name, "amd", total, max(0, total - used)))
    return gpus


def _torch(notes: list[str]) -> list[GPU]:
    """CUDA or ROCm devices through torch (only called when torch is already paid for)."""
    try:
        import torch
    except ImportError:
        return []
    try:
        if not torch.cuda.is_available():
            return []
        vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
        gpus = []
        for i in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(i)
            gpus.append(GPU(i, torch.cuda.get_device_name(i), vendor, int(total), int(free)))
        return gpus
    except Exception as e:  # a broken driver must not stop the app from planning for the CPU
        notes.append(f"torch could not read the GPUs ({type(e).__name__}: {e})")
        return []


def _apple(ram_total: int, ram_available: int) -> list[GPU]:
    """Apple silicon: the GPU can wire at most a share of the unified memory.

    macOS caps GPU-wired memory at about 2/3 of RAM up to 36 GiB machines and
    3/4 above (Metal's recommendedMaxWorkingSetSize); ``sysctl
    iogpu.wired_limit_mb`` overrides it when set."""
    if sys.platform != "darwin" or platform.machine() != "arm64":
        return []
    limit = int(ram_total * (0.75 if ram_total > 36 * GiB else 2 / 3))
    try:
        out = subprocess.run(["sysctl", "-n", "iogpu.wired_limit_mb"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        if out.isdigit() and int(out) > 0:
            limit = int(out) * MiB
    except (OSError, subprocess.SubprocessError):
        pass
    return [GPU(0, "Apple GPU (unified memory)", "apple", limit, min(limit, ram_available), unified=True)]


def _ram() -> tuple[int, int, int]:
    try:
        import psutil
        vm = psutil.virtual_memory()
        cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
        return int(vm.total), int(vm.available), int(cores)
    except Exception:  # psutil is a dependency, but never let the probe crash the app
        return 0, 0, os.cpu_count() or 1


def probe(*, allow_torch: bool = False) -> Hardware:
    """Probe this machine. Never raises; what it could not see is in ``notes``.

    ``allow_torch``: also ask torch (costs its import if not yet imported);
    torch is asked anyway when it is already imported.
    """
    notes: list[str] = []
    ram_total, ram_avail, cores = _ram()
    if not ram_total:
        notes.append("psutil could not read system memory; RAM is treated as unknown (0)")
    gpus = _nvml(notes)
    if gpus is None:
        gpus = _nvidia_smi(notes)
    gpus = list(gpus) + _amd_sysfs(notes)
    if not gpus and (allow_torch or "torch" in sys.modules):
        gpus = _torch(notes)
    if not gpus:
        gpus = _apple(ram_total, ram_avail)
    if not gpus:
        notes.append("no GPU found: the model runs on the CPU from system RAM")
    gpus = [replace(g, index=i) for i, g in enumerate(gpus)]
    return Hardware(tuple(gpus), ram_total, ram_avail, cores, "probe", tuple(notes))


def cpu_only() -> Hardware:
    """This machine's RAM and cores without looking for GPUs: a quick answer for
    "does it fit in RAM" where the GPU probe (nvidia-smi, sysfs) would cost too much."""
    ram_total, ram_avail, cores = _ram()
    return Hardware((), ram_total, ram_avail, cores, "probe")


def simulated(gpu: str | int | None = None, ram: str | int | None = None, *,
              base: Hardware | None = None, cores: int | None = None) -> Hardware:
    """A machine for tests and ``--gpu/--ram``.

    ``gpu``: "8GiB", "24GiB,24GiB" for several, or "none"/"0" for CPU-only;
    None keeps the base machine's GPUs. ``ram``: total (= available) RAM; None
    keeps the base's. ``base`` defaults to a real probe, so ``--gpu 8GiB``
    alone still plans against this machine's RAM.
    """
    if base is None and (gpu is None or ram is None):
        base = probe()
    gpus: tuple[GPU, ...] = ()
    if gpu is None:
        assert base is not None  # probed above
        gpus = base.gpus
    elif str(gpu).strip().lower() not in ("none", "0", "cpu", ""):
        sizes = [parse_size(s) for s in str(gpu).split(",")] if isinstance(gpu, str) else [parse_size(gpu)]
        gpus = tuple(GPU(i, f"simulated GPU {i}", "simulated", s, s)
                     for i, s in enumerate(sizes))
    if ram is None:
        assert base is not None  # probed above
        ram_total, ram_avail = base.ram_total, base.ram_available
    else:
        ram_total = ram_avail = parse_size(ram)
    return Hardware(tuple(gpus), ram_total, ram_avail, cores or (base.cpu_cores if base else 8),
                    "simulated", ())

"""Which llama.cpp runtime this machine gets, chosen by evidence (stdlib only).

scripts/setup.py runs before the virtual environment exists, so this module
uses only the standard library. It reuses the engine's own hardware probe
(engine/sizing/hardware.py, formerly engine/hardware.py, loaded by file path:
it needs nothing outside the standard library) for the GPUs' names, and adds
what only a build needs: each NVIDIA card's compute capability, the PCI vendors
of the display devices (an Intel or AMD GPU that the engine's VRAM probe does
not count still runs Vulkan), and the installed Vulkan drivers.

The ladder, best first: Metal on Apple silicon; CUDA for NVIDIA cards CUDA 13
can target (compute capability 7.5 and up), built for those cards only; Vulkan
for any GPU with a Vulkan driver (AMD, Intel, NVIDIA without CUDA), and for
Mesa's software device lavapipe on a developer set-up (``--dev``: the device
tests run on it); then the portable CPU builds. ``HEARTH_RUNTIME`` forces one.

One runtime per build, not ``GGML_BACKEND_DL``: llama-cpp-python 0.3.36 never
calls ``ggml_backend_load_all`` (llama-cpp-python#2069), so a DL build would
register no backend unless Hearth called ``ggml_backend_load_all_from_path``
through ctypes before ``llama_backend_init``; its CMakeLists installs
``ggml-cpu`` but none of ``GGML_CPU_ALL_VARIANTS``' per-CPU modules; and each
further configuration is another 20-40 minute build to verify on 2 cores. Set-up
builds for the machine it runs on, where one runtime is what that machine has.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ggml_patch import PATCH_ID

RUNTIMES = ("cuda", "vulkan", "metal", "cpu")
CUDA_MIN_CAP = (7, 5)   # CUDA 13 dropped everything older; Vulkan serves those cards
PCI_VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}
ICD_DIRS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")
SOFTWARE_ICDS = ("lvp_icd",)   # Mesa's lavapipe: a Vulkan device that runs on the CPU

# Exactness on the CPU backend, kept in every build (GPU builds run the CPU
# layers and the CPU-side ops too). AMX off: those kernels crash on some CPUs.
# LLAMAFILE on, as llama.cpp's own builds have it: its tinyBLAS kernels give
# prompt batches of Q8_0, Q4_0 and F16 weights llama.cpp's speed. They serve
# only multi-token batches, so a token's logits would depend on how it was
# batched; ggml_patch.py makes them a run-time switch, which the exact profile
# turns off (then the prefix cache and speculative verification give
# bit-identical results to plain decoding; tests check this). Never
# -march=native: the wheel is portable.
# RPC on in every build (#45): another process's or machine's device is one more device here
# (engine/backends/llama/rpc.py). RDMA off: it would link libibverbs wherever that is installed.
_RPC = "-DGGML_RPC=ON -DGGML_RPC_RDMA=OFF"
_AMX_OFF = f"-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_LLAMAFILE=ON {_RPC}"
CPU_LADDER = (
    ("avx2", f"-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF {_AMX_OFF}"),
    ("sse42", "-DGGML_NATIVE=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF "
              f"-DGGML_BMI2=OFF -DGGML_AVX512=OFF {_AMX_OFF}"),
)
# Apple silicon: no x86 flags; NATIVE off with an explicit ARM baseline every M-series chip has.
_APPLE_CPU = f"-DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16 -DGGML_LLAMAFILE=ON {_RPC}"
# lavapipe is a Vulkan device of type CPU: ggml uses it only when it is named.
# (llama.cpp's llvmpipe CI also sets GGML_VK_DISABLE_F16/COOPMAT; lavapipe from
# Mesa 22.3 passed the probe and the device tests without them, at the same speed.)
SOFTWARE_VULKAN_ENV = (("GGML_VK_VISIBLE_DEVICES", "0"),)


@dataclass(frozen=True)
class Machine:
    """What set-up saw: enough to choose a runtime and to say why."""
    gpus: tuple[str, ...] = ()           # names, from the engine's hardware probe
    nvidia_caps: tuple[str, ...] = ()    # compute capability per NVIDIA card, "8.6"
    pci_vendors: tuple[str, ...] = ()    # display devices' vendors: "nvidia", "amd", "intel"
    vulkan_icds: tuple[str, ...] = ()    # installed Vulkan drivers (ICD manifest stems)
    system: str = sys.platform
    arch: str = field(default_factory=platform.machine)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Runtime:
    """One build to try: its CMake flags define it (their hash names the cached wheel)."""
    name: str                  # cuda | vulkan | metal | cpu
    flavour: str               # names the wheel: cuda-sm90, vulkan, metal, avx2, sse42
    flags: str                 # CMake flags without machine paths (toolchains add those)
    why: str                   # the evidence, for the user
    probe_env: tuple[tuple[str, str], ...] = ()

    @property
    def gpu(self) -> bool:
        return self.name != "cpu"

    def key(self, version: str) -> str:
        """Names the cached wheel: the version, the flags and the source patch (ggml_patch.py)."""
        return hashlib.sha256(f"{version} {self.flags} {PATCH_ID}".encode()).hexdigest()[:12]


# -- detection ----------------------------------------------------------------------------

def engine_hardware(root: Path):
    """The engine's own hardware probe module, loaded by path (no engine import, no venv)."""
    for rel in ("engine/sizing/hardware.py", "engine/hardware.py"):
        path = root / rel
        if not path.is_file():
            continue
        spec = importlib.util.spec_from_file_location("_hearth_hardware", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
        try:
            spec.loader.exec_module(mod)
        except Exception:  # a refactor gave it non-stdlib imports: detection below still decides
            sys.modules.pop(spec.name, None)
            continue
        return mod
    return None


def _nvidia_caps() -> tuple[str, ...]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return ()
    try:
        out = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(c.strip() for c in out.splitlines() if c.strip()[:1].isdigit())


def _pci_vendors(root: Path = Path("/sys/class/drm")) -> tuple[str, ...]:
    found = []
    for card in sorted(root.glob("card[0-9]*")) if root.is_dir() else []:
        if "-" in card.name:  # connectors such as card0-DP-1
            continue
        try:
            vendor = (card / "device" / "vendor").read_text().strip().lower()
        except OSError:
            continue
        if vendor in PCI_VENDORS:  # others are server BMCs and virtual displays
            found.append(PCI_VENDORS[vendor])
    return tuple(found)


def _vulkan_icds(env: dict | None = None) -> tuple[str, ...]:
    env = os.environ if env is None else env
    files = [p for var in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES") for p in env.get(var, "").split(os.pathsep) if p]
    for d in ICD_DIRS:
        if os.path.isdir(d):
            files += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".json")]
    return tuple(sorted({Path(f).name.split(".")[0] for f in files}))


def detect(root: Path) -> Machine:
    """Probe this machine for what decides the runtime. Never raises."""
    notes: list[str] = []
    gpus: tuple[str, ...] = ()
    hw = engine_hardware(root)
    if hw is None:
        notes.append("the engine's hardware probe could not be loaded; GPUs are read from nvidia-smi and sysfs")
    else:
        try:
            found = hw.probe()
            gpus = tuple(g.name for g in found.gpus)
            notes.extend(n for n in found.notes if ("NVML" in n or "nvidia" in n) and not n.startswith("no GPU"))
        except Exception as e:  # the probe promises not to raise; set-up must not die if it does
            notes.append(f"the engine's hardware probe failed ({type(e).__name__}: {e})")
    return Machine(gpus, _nvidia_caps(), _pci_vendors(), _vulkan_icds(), sys.platform, platform.machine(),
                   tuple(notes))


# -- the ladder -----------------------------------------------------------------------------

def _cap(text: str) -> tuple[int, int] | None:
    try:
        major, minor = text.split(".")
        return int(major), int(minor)
    except ValueError:
        return None


def cuda_archs(caps: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """CMAKE_CUDA_ARCHITECTURES entries for the cards ('8.6' -> '86-real'), and the caps too old for CUDA 13."""
    ok, old = [], []
    for c in caps:
        v = _cap(c)
        if v is None:
            continue
        (ok if v >= CUDA_MIN_CAP else old).append(c)
    return sorted({c.replace(".", "") + "-real" for c in ok}), sorted(set(old))


def cpu_runtimes(machine: Machine, why: str) -> list[Runtime]:
    if machine.system == "darwin" and machine.arch == "arm64":
        return [Runtime("cpu", "apple-cpu", _APPLE_CPU, why)]
    return [Runtime("cpu", flavour, flags, why) for flavour, flags in CPU_LADDER]


def _gpu_cpu_flags(machine: Machine) -> str:
    return _APPLE_CPU if machine.system == "darwin" and machine.arch == "arm64" else CPU_LADDER[0][1]


def ladder(machine: Machine, *, dev: bool = False, forced: str | None = None) -> tuple[list[Runtime], list[str]]:
    """The runtimes to try, best first, and why any GPU runtime was left out."""
    if forced is not None and forced not in RUNTIMES:
        raise ValueError(f"HEARTH_RUNTIME={forced!r}: choose one of {', '.join(RUNTIMES)}")
    notes: list[str] = []
    out: list[Runtime] = []
    cpu_flags = _gpu_cpu_flags(machine)
    names = ", ".join(machine.gpus) or "a GPU"
    apple = machine.system == "darwin" and machine.arch == "arm64"
    if apple or forced == "metal":
        out.append(Runtime("metal", "metal", f"-DGGML_METAL=ON -DGGML_METAL_EMBED_LIBRARY=ON {cpu_flags}",
                           "Apple silicon: Metal" if apple else "HEARTH_RUNTIME=metal"))
    archs, old = cuda_archs(machine.nvidia_caps)
    if old:
        notes.append(f"CUDA: compute capability {', '.join(old)} is below what CUDA 13 targets (7.5); "
                     "those cards run Vulkan")
    if archs:
        flavour = "cuda-" + "-".join("sm" + a.split("-")[0] for a in archs)
        # LLAVA_BUILD off: Hearth never loads libmtmd, and it is minutes of the longest build.
        out.append(Runtime("cuda", flavour, f"-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)} "
                           f"-DLLAVA_BUILD=OFF {cpu_flags}",
                           f"NVIDIA {names} (compute capability {', '.join(machine.nvidia_caps)})"))
    elif forced == "cuda":
        notes.append("HEARTH_RUNTIME=cuda, but nvidia-smi reports no card to build for")
    hardware_icds = [i for i in machine.vulkan_icds if i not in SOFTWARE_ICDS]
    software = [i for i in machine.vulkan_icds if i in SOFTWARE_ICDS]
    gpu_present = bool(machine.pci_vendors or machine.nvidia_caps)
    vk_flags = f"-DGGML_VULKAN=ON {cpu_flags}"
    if gpu_present and hardware_icds and not apple:
        vendors = ", ".join(sorted(set(machine.pci_vendors) or {"nvidia"}))
        out.append(Runtime("vulkan", "vulkan", vk_flags, f"{vendors} GPU with a Vulkan driver ({names})"))
    elif software and (dev or forced == "vulkan") and not apple:
        out.append(Runtime("vulkan", "vulkan", vk_flags,
                           "no GPU; Mesa's software Vulkan device (lavapipe) for the device tests",
                           SOFTWARE_VULKAN_ENV))
    elif gpu_present and not apple:
        notes.append(f"Vulkan: {names} has no Vulkan driver installed "
                     "(Debian/Ubuntu: apt install mesa-vulkan-drivers, or the vendor's driver)")
    elif forced == "vulkan":
        notes.append("HEARTH_RUNTIME=vulkan, but no Vulkan driver is installed")
    gpu_why = "; ".join(notes)
    out += cpu_runtimes(machine, "no usable GPU runtime" + (f" ({gpu_why})" if gpu_why else "")
                        if not out else "fallback after the GPU runtimes")
    if forced is not None:
        out = [r for r in out if r.name == forced]
        if not out:
            raise ValueError(f"HEARTH_RUNTIME={forced}: not possible on this machine"
                             + (f" ({gpu_why})" if gpu_why else ""))
    return out, notes


def describe(machine: Machine) -> str:
    """One line for set-up's output."""
    parts = [", ".join(machine.gpus) or "no GPU"]
    if machine.nvidia_caps:
        parts.append(f"CUDA compute {', '.join(machine.nvidia_caps)}")
    if machine.vulkan_icds:
        parts.append(f"Vulkan drivers: {', '.join(machine.vulkan_icds)}")
    return "; ".join(parts)


# -- torch, for the transformers backend ----------------------------------------------------

TORCH_CPU = "torch==2.13.0"    # a CPU wheel on these machines' local index; PyPI has no +cpu wheels
TORCH_CUDA = "torch==2.14.1"   # PyPI's Linux x86_64 torch: a CUDA 13 build (several GB with its nvidia-* wheels)
TORCH_PROBE = "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; " \
              "torch.ones(8, device='cuda').sum().item(); print(torch.cuda.get_device_name(0))"


def torch_choice(machine: Machine, forced: str | None = None) -> tuple[str, str, bool]:
    """(pip requirement, why, whether it must pass TORCH_PROBE) for the transformers backend.

    A CUDA build only for an NVIDIA card CUDA 13 still targets, on Linux x86_64 (PyPI's other
    platforms get CPU wheels anyway); ``HEARTH_TORCH=cpu|cuda`` forces one. AMD (ROCm) wheels are
    not on PyPI, so those machines keep the CPU wheel and say so; their GGUF models run on Vulkan."""
    if forced not in (None, "cpu", "cuda"):
        raise ValueError(f"HEARTH_TORCH={forced!r}: choose cpu or cuda")
    archs, old = cuda_archs(machine.nvidia_caps)
    linux_x86 = machine.system.startswith("linux") and machine.arch in ("x86_64", "AMD64")
    if forced == "cpu":
        return TORCH_CPU, "HEARTH_TORCH=cpu", False
    if forced == "cuda" or (archs and linux_x86):
        names = ", ".join(machine.gpus) or "an NVIDIA card"
        return TORCH_CUDA, f"CUDA 13 torch for {names}", True
    if old:
        return TORCH_CPU, f"compute capability {', '.join(old)} is below what PyPI's CUDA 13 torch targets", False
    if "amd" in machine.pci_vendors:
        return TORCH_CPU, "AMD GPU: PyPI has no ROCm torch; GGUF models use it through Vulkan", False
    return TORCH_CPU, "no NVIDIA GPU", False

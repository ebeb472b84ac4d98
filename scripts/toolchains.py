"""What a GPU build of llama.cpp needs beyond a C++ compiler, found or fetched (stdlib only).

Used by scripts/setup.py before the virtual environment exists. Each ``*_args``
function returns the CMake arguments that point the build at the toolchain, or
raises :class:`Unavailable` with a sentence saying what is missing and how to
get it; set-up then falls back to the next runtime down and shows that sentence.

- CUDA: nvcc from CUDA_HOME or PATH when that toolkit also has cuBLAS; else the
  CUDA toolkit wheels from PyPI, installed into the venv and patched for the
  three gaps their layout has (no lib64, no unversioned .so links, no libcuda
  stub, hence ``GGML_CUDA_NO_VMM``).
- Vulkan: ggml-vulkan uses ``VK_EXT_layer_settings``, which Debian 12's headers
  (1.3.239) lack. When the system's headers are too old, Debian 13's
  libvulkan-dev and spirv-headers are fetched with apt-get under a private apt
  configuration (nothing is installed into the system) and unpacked into
  Hearth's cache. The loader (libvulkan1) and glslc come from the system.
"""
from __future__ import annotations

import getpass
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# Debian 13 ("trixie") carries Vulkan headers 1.4.309; its archive key ships in
# Debian 12's debian-archive-keyring, so the download is checked like any other.
VULKAN_SUITE = "trixie"
VULKAN_MIRROR = "http://deb.debian.org/debian"
VULKAN_DEBS = ("libvulkan-dev", "spirv-headers")
KEYRINGS = ("/usr/share/keyrings/debian-archive-keyring.gpg",)
CUDA_WHEELS = "cuda-toolkit[nvcc,cudart,cublas,cccl,crt,nvvm]==13.0.2"


class Unavailable(Exception):
    """A runtime's toolchain is missing; the message says what to install."""


def _out(*cmd: str, timeout: float = 60) -> str:
    try:
        p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (p.stdout or "") + (p.stderr or "")


# -- Vulkan ---------------------------------------------------------------------------

def spirv_config(include: Path) -> Path | None:
    """The SPIRV-Headers CMake package beside ``include`` (ggml-vulkan's CMake asks for it)."""
    prefix = include.parent
    for d in (prefix / "share" / "cmake", prefix / "lib" / "cmake", *sorted(prefix.glob("lib/*/cmake"))):
        if (d / "SPIRV-Headers" / "SPIRV-HeadersConfig.cmake").is_file():
            return d / "SPIRV-Headers"
    return None


def headers_ok(include: Path) -> bool:
    """Vulkan headers new enough for ggml-vulkan, with SPIR-V's in the same tree
    (ggml finds spirv.hpp with __has_include, so it must sit beside the Vulkan
    headers) and SPIR-V's CMake package."""
    core = include / "vulkan" / "vulkan_core.h"
    try:
        text = core.read_text(errors="replace")
    except OSError:
        return False
    return ("VK_EXT_layer_settings" in text and (include / "spirv" / "unified1" / "spirv.hpp").is_file()
            and spirv_config(include) is not None)


def vulkan_loader() -> Path | None:
    """The Vulkan loader library (libvulkan1) the build links and the app loads."""
    for pattern in ("/usr/lib/x86_64-linux-gnu/libvulkan.so.1", "/usr/lib/*-linux-gnu/libvulkan.so.1",
                    "/usr/lib64/libvulkan.so.1", "/usr/lib/libvulkan.so.1"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return Path(hits[0])
    return None


def fetch_vulkan_headers(dest: Path) -> Path:
    """Download Debian 13's Vulkan and SPIR-V headers into ``dest`` (once) and
    return the include directory. Raises Unavailable when apt cannot do it."""
    include = dest / "usr" / "include"
    if headers_ok(include):
        return include
    apt, dpkg = shutil.which("apt-get"), shutil.which("dpkg-deb")
    keyring = next((k for k in KEYRINGS if os.path.isfile(k)), None)
    if not (apt and dpkg and keyring):
        raise Unavailable("the Vulkan headers here are too old for llama.cpp (it needs VK_EXT_layer_settings, "
                          "headers 1.3.2xx or newer) and they cannot be fetched without apt-get and Debian's "
                          "archive keyring; install Vulkan headers 1.4 (libvulkan-dev) and spirv-headers")
    work = dest.parent / (dest.name + ".apt")
    shutil.rmtree(work, ignore_errors=True)
    for d in ("lists/partial", "cache/archives/partial", "parts", "debs"):
        (work / d).mkdir(parents=True)
    (work / "sources.list").write_text(f"deb [signed-by={keyring}] {VULKAN_MIRROR} {VULKAN_SUITE} main\n")
    # A private apt: its own sources, lists and cache, so the system's apt state
    # and installed packages are untouched and no root is needed.
    opts = ["-o", f"Dir::Etc::SourceList={work}/sources.list", "-o", f"Dir::Etc::SourceParts={work}/parts",
            "-o", f"Dir::Etc::PreferencesParts={work}/parts", "-o", "Dir::Etc::Preferences=/dev/null",
            "-o", f"Dir::State::Lists={work}/lists", "-o", f"Dir::Cache={work}/cache",
            "-o", f"APT::Sandbox::User={getpass.getuser()}", "-q"]
    for cmd in ([apt, *opts, "update"], [apt, *opts, "download", *VULKAN_DEBS]):
        p = subprocess.run(cmd, cwd=work / "debs", capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise Unavailable(f"could not fetch Vulkan headers from Debian {VULKAN_SUITE} "
                              f"({' '.join(cmd[len(opts) + 1:])}: {(p.stderr or p.stdout).strip()[-300:]})")
    partial = dest.parent / (dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for deb in sorted((work / "debs").glob("*.deb")):
        subprocess.run([dpkg, "-x", str(deb), str(partial)], check=True, timeout=120)
    if not headers_ok(partial / "usr" / "include"):
        raise Unavailable(f"the headers fetched from Debian {VULKAN_SUITE} lack VK_EXT_layer_settings or spirv.hpp")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    shutil.rmtree(work, ignore_errors=True)
    return include


def vulkan_args(cache: Path) -> list[str]:
    """CMake arguments for a Vulkan build: headers, loader and glslc."""
    glslc = shutil.which("glslc")
    if not glslc:
        raise Unavailable("glslc, the shader compiler, is not installed (Debian/Ubuntu: apt install glslc)")
    loader = vulkan_loader()
    if loader is None:
        raise Unavailable("the Vulkan loader is not installed (Debian/Ubuntu: apt install libvulkan1)")
    system = Path("/usr/include")
    include = system if headers_ok(system) else fetch_vulkan_headers(cache / "vulkan-headers")
    return [f"-DVulkan_INCLUDE_DIR={include}", f"-DVulkan_LIBRARY={loader}", f"-DVulkan_GLSLC_EXECUTABLE={glslc}",
            f"-DSPIRV-Headers_DIR={spirv_config(include)}"]


# -- CUDA -------------------------------------------------------------------------------

def nvcc_root(nvcc: str) -> Path | None:
    """The toolkit directory nvcc itself uses (it may be a wrapper script elsewhere)."""
    text = _out(nvcc, "--dryrun", "-c", "-x", "cu", "/dev/null", "-o", os.devnull)
    m = re.search(r"^#\$ TOP=(.+)$", text, re.M)
    if m:
        return Path(m.group(1).strip()).resolve()
    real = Path(nvcc).resolve()
    return real.parent.parent if real.parent.name == "bin" else None


def nvcc_version(nvcc: str) -> tuple[int, int] | None:
    m = re.search(r"release (\d+)\.(\d+)", _out(nvcc, "--version"))
    return (int(m.group(1)), int(m.group(2))) if m else None


def has_cublas(root: Path) -> bool:
    libs = [d for d in (root / "lib64", root / "lib", *root.glob("targets/*/lib")) if d.is_dir()]
    return (any(glob.glob(str(d / "libcublas.so*")) for d in libs)
            and (root / "include" / "cublas_v2.h").is_file())


def system_nvcc() -> str | None:
    """nvcc from CUDA_HOME / CUDA_PATH, PATH, or the usual install place."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
            return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None)


def patch_wheel_toolkit(root: Path) -> None:
    """Fill the gaps of the PyPI toolkit layout that nvcc and CMake trip over:
    nvcc.profile looks in lib64, CMake's FindCUDAToolkit wants unversioned .so."""
    lib = root / "lib"
    if not (root / "lib64").exists():
        (root / "lib64").symlink_to("lib")
    for versioned in sorted(lib.glob("lib*.so.*")):
        plain = lib / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.name)


def wheel_toolkit(python: Path) -> Path:
    """The CUDA toolkit wheels in the environment of ``python`` (installed first
    when missing, e.g. beside torch they often are already); return their root."""
    sp = _out(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    root = Path(sp) / "nvidia" / "cu13"
    if not ((root / "bin" / "nvcc").is_file() and has_cublas(root)):
        p = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", "-q", "install", CUDA_WHEELS],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise Unavailable(f"no nvcc with cuBLAS here and the CUDA toolkit wheels did not install "
                              f"({(p.stderr or p.stdout).strip()[-300:]})")
    if not (root / "bin" / "nvcc").is_file():
        raise Unavailable(f"the CUDA toolkit wheels installed no nvcc under {root}")
    patch_wheel_toolkit(root)
    return root


def cuda_args(python: Path) -> list[str]:
    """CMake arguments that point the build at a CUDA toolkit (system or wheels)."""
    nvcc = system_nvcc()
    root = nvcc_root(nvcc) if nvcc else None
    if nvcc and root and has_cublas(root):
        return [f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCUDAToolkit_ROOT={root}"]
    if sys.platform != "linux":
        raise Unavailable("no CUDA toolkit with nvcc and cuBLAS found (set CUDA_HOME)")
    root = wheel_toolkit(python)
    # The wheels have no libcuda.so stub to link against; the driver's virtual
    # memory API is then left out (ggml falls back to its plain memory pool).
    return [f"-DCMAKE_CUDA_COMPILER={root / 'bin' / 'nvcc'}", f"-DCUDAToolkit_ROOT={root}", "-DGGML_CUDA_NO_VMM=ON"]

"""llama.cpp's own tools (``llama-bench``, ``llama-quantize``, ``llama-server``), built as llama.cpp
builds itself: the references ``bench speed`` and ``bench serve`` measure Hearth against.

The source is the llama.cpp vendored in the llama-cpp-python sdist Hearth's runtime is built from
(the same version, so the same kernels), fetched with pip. The build keeps llama.cpp's default
CMake options (tinyBLAS, ``GGML_LLAMAFILE``, on; the CPU repack on) and only makes the CPU flags
portable as the wheel's are (``GGML_NATIVE`` off: a native build crashes in the AMX kernels on
some machines): what a person who builds llama.cpp, or downloads a release, runs. CPU only. It
is cached by version and flags (``HEARTH_LLAMA_TOOLS`` overrides the folder); the first build
takes some minutes on two cores. ``llama-server`` is built on its own first use, into the same
folder, with the same flags (the key names the kernels' flags; the server's own switches, which
compile no kernel, are added at build time): no web UI (nothing to download) and no OpenSSL (it
answers on loopback only).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

import llama_cpp

VERSION = llama_cpp.__version__
# Portable x86-64 with AVX2, as the wheel; everything else at llama.cpp's defaults (LLAMAFILE on).
X86_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_AVX512=OFF", "-DGGML_AMX_TILE=OFF",
             "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF")
ARM_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16")
COMMON = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
          "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TOOLS=ON", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_OPENMP=ON")
TARGETS = ("llama-bench", "llama-quantize")
SERVER = "llama-server"
# What building llama-server adds to flags(): the server itself, without the web UI (which it would
# download from the Hub at build time) and without HTTPS (it serves the benchmark on loopback).
SERVER_FLAGS = ("-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                "-DLLAMA_OPENSSL=OFF")


def flags(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    import platform

    cpu = ARM_FLAGS if platform.machine().lower() in ("arm64", "aarch64") else X86_FLAGS
    return (*COMMON, *cpu, *extra)


def build_flags(extra: tuple[str, ...], targets: tuple[str, ...]) -> tuple[str, ...]:
    """CMake's flags for building ``targets``: ``flags(extra)``, plus SERVER_FLAGS where llama-server is
    among them (later -D options win in CMake, so they override COMMON's LLAMA_BUILD_SERVER=OFF)."""
    return (*flags(extra), *(SERVER_FLAGS if SERVER in targets else ()))


def tools_dir(extra: tuple[str, ...] = ()) -> Path:
    key = hashlib.sha256(" ".join((VERSION, *flags(extra))).encode()).hexdigest()[:12]
    root = Path(os.environ.get("HEARTH_LLAMA_TOOLS") or Path.home() / ".cache" / "hearth" / "llama-tools")
    return root / f"{VERSION}-{key}"


def source(into: Path, wanted: Callable[[str], bool] = lambda _name: True) -> Path:
    """llama.cpp's source from the llama-cpp-python sdist of this version, unpacked under ``into``:
    the files whose path under llama.cpp's folder ``wanted`` accepts (default: all)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        "-d", tmp, f"llama-cpp-python=={VERSION}"], check=True)
        (sdist,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        prefix = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
        with tarfile.open(sdist) as t:
            members = [m for m in t.getmembers() if m.name.startswith(prefix) and wanted(m.name[len(prefix):])]
            t.extractall(into, members=members, filter="data")
    return into / prefix


def ensure_tools(extra: tuple[str, ...] = (), say=lambda s: print(s, file=sys.stderr),
                 targets: tuple[str, ...] = TARGETS) -> Path:
    """The folder holding ``targets`` (default ``llama-bench`` and ``llama-quantize``), building the
    missing ones on first use; each lands in the folder whole (copied beside, then renamed), so a
    build that fails or is stopped leaves nothing half-written that a later run would take."""
    out = tools_dir(extra)
    missing = tuple(t for t in targets if not (out / t).is_file())
    if not missing:
        return out
    if shutil.which("cmake") is None:
        raise SystemExit("building llama.cpp's tools needs cmake (pip install cmake, or the system's)")
    cmake_flags = build_flags(extra, missing)
    say(f"building llama.cpp {VERSION}'s {' and '.join(missing)} (once; some minutes): {' '.join(cmake_flags)}")
    with tempfile.TemporaryDirectory() as tmp:
        src = source(Path(tmp))
        build = Path(tmp) / "build"
        subprocess.run(["cmake", "-S", str(src), "-B", str(build), *cmake_flags], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(build), "--config", "Release", "-j", str(os.cpu_count() or 2),
                        "--target", *missing], check=True, stdout=subprocess.DEVNULL)
        out.mkdir(parents=True, exist_ok=True)
        for t in missing:
            part = out / f"{t}.part"
            shutil.copy2(build / "bin" / t, part)
            part.replace(out / t)
    return out


if __name__ == "__main__":
    # ``python -m engine.bench.llama_tools [TOOL...]``: build (once) and print the folder; scripts/test.sh's set-up.
    known = (*TARGETS, SERVER)
    wanted = tuple(sys.argv[1:]) or TARGETS
    if any(t not in known for t in wanted):
        raise SystemExit(f"llama_tools: the tools are {', '.join(known)}, not {' '.join(sys.argv[1:])}")
    print(ensure_tools(targets=wanted))

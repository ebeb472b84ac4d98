"""llama.cpp's own tools (``llama-bench``, ``llama-quantize``), built as llama.cpp builds itself:
the reference ``bench speed`` measures Hearth against.

The source is the llama.cpp vendored in the llama-cpp-python sdist Hearth's runtime is built from
(the same version, so the same kernels), fetched with pip. The build keeps llama.cpp's default
CMake options (tinyBLAS, ``GGML_LLAMAFILE``, on; the CPU repack on) and only makes the CPU flags
portable as the wheel's are (``GGML_NATIVE`` off: a native build crashes in the AMX kernels on
some machines): what a person who builds llama.cpp, or downloads a release, runs. CPU only. It
is cached by version and flags (``HEARTH_LLAMA_TOOLS`` overrides the folder); the first build
takes some minutes on two cores.
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


def flags(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    import platform

    cpu = ARM_FLAGS if platform.machine().lower() in ("arm64", "aarch64") else X86_FLAGS
    return (*COMMON, *cpu, *extra)


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


def ensure_tools(extra: tuple[str, ...] = (), say=lambda s: print(s, file=sys.stderr)) -> Path:
    """The folder holding ``llama-bench`` and ``llama-quantize`` (built on first use)."""
    out = tools_dir(extra)
    if all((out / t).is_file() for t in TARGETS):
        return out
    if shutil.which("cmake") is None:
        raise SystemExit("building llama.cpp's tools needs cmake (pip install cmake, or the system's)")
    say(f"building llama.cpp {VERSION}'s llama-bench and llama-quantize (once; some minutes): {' '.join(flags(extra))}")
    with tempfile.TemporaryDirectory() as tmp:
        src = source(Path(tmp))
        build = Path(tmp) / "build"
        subprocess.run(["cmake", "-S", str(src), "-B", str(build), *flags(extra)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(build), "--config", "Release", "-j", str(os.cpu_count() or 2),
                        "--target", *TARGETS], check=True, stdout=subprocess.DEVNULL)
        part = out.with_name(out.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        for t in TARGETS:
            shutil.copy2(build / "bin" / t, part / t)
        shutil.rmtree(out, ignore_errors=True)
        part.rename(out)
    return out

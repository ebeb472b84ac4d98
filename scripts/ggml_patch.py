"""Batch kernels as a run-time switch: the one change Hearth makes to the llama.cpp it builds (stdlib only).

llama.cpp's CPU backend has two matrix-multiplication kernels that serve prompt batches only:
tinyBLAS (llamafile's sgemm: Q8_0, Q4_0, F16, F32 weights), which its release builds compile in,
and the tiled K-quant matmul (batches of 8+ rows). Without tinyBLAS, Q8_0 prefill runs at ~0.6x
llama.cpp's; without the tiled kernel, K-quant prefill loses ~10%. But with either, a token's
logits depend on how it was batched, and Hearth's exact profile promises that they do not (the
prefix cache and speculative verification give what plain decoding gives). CMake can only compile
tinyBLAS in or out, and ggml reads the tiled kernel's switch once per process, so this patch makes
both one switch read at run time:

- ``ggml_cpu_batch_kernels``, an exported int (1: on), which Hearth sets through ctypes
  (engine/backends/llama/params.py: off while a model in the exact profile is loaded);
- each graph reads it once, before its threads start (into the thread pool), so every thread of
  one matrix multiplication takes the same path even if the switch moves meanwhile.

``patch(src)`` edits the extracted sdist in place and fails loudly when the vendored source no
longer has the lines it expects, instead of building a wheel without the switch;
``patched_source`` downloads, extracts and patches it (set-up's build, gpu_check's kit).
"""
from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

PATCH_ID = "batch-kernels-switch-1"  # part of the cached wheel's key: bump it when the edits change
SWITCH = "ggml_cpu_batch_kernels"
CPU_C = "vendor/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c"

_EXPORT = """
// Hearth: tinyBLAS and the tiled matmul behind one run-time switch (scripts/ggml_patch.py), read once per graph.
#if defined(_WIN32)
__declspec(dllexport)
#else
__attribute__((visibility("default")))
#endif
int ggml_cpu_batch_kernels = 1;
"""

# (what the vendored file has, what it becomes); each must occur exactly once.
EDITS: tuple[tuple[str, str], ...] = (
    ('#include "llamafile/sgemm.h"\n#endif\n',
     '#include "llamafile/sgemm.h"\n#endif\n' + _EXPORT),
    ("    uint32_t     poll;        // Polling level (0 - no polling)\n",
     "    uint32_t     poll;        // Polling level (0 - no polling)\n"
     "    int          batch_kernels; // Hearth: ggml_cpu_batch_kernels as this graph began\n"),
    ("        threadpool->prio             = tpp->prio;\n",
     "        threadpool->prio             = tpp->prio;\n"
     "        threadpool->batch_kernels    = ggml_cpu_batch_kernels;\n"),
    ("        threadpool->ec               = GGML_STATUS_SUCCESS;\n    }\n\n#ifdef GGML_USE_OPENMP\n",
     "        threadpool->ec               = GGML_STATUS_SUCCESS;\n    }\n"
     "    threadpool->batch_kernels = ggml_cpu_batch_kernels;  // before any thread of this graph runs\n"
     "\n#ifdef GGML_USE_OPENMP\n"),
    ("    const bool src1_cont = ggml_is_contiguous(src1);\n\n    if (src1_cont) {\n",
     "    const bool src1_cont = ggml_is_contiguous(src1);\n\n"
     "    if (src1_cont && params->threadpool->batch_kernels) {\n"),
    ("#if GGML_USE_LLAMAFILE\n    if (src1->type != vec_dot_type) {\n",
     "#if GGML_USE_LLAMAFILE\n    if (src1->type != vec_dot_type && params->threadpool->batch_kernels) {\n"),
    ("    if (ggml_compute_forward_mul_mat_tiled(params, dst)) {\n",
     "    if (params->threadpool->batch_kernels && ggml_compute_forward_mul_mat_tiled(params, dst)) {\n"),
    ("        if (ggml_compute_forward_mul_mat_id_tiled(params, dst, cur_a,",
     "        if (params->threadpool->batch_kernels && ggml_compute_forward_mul_mat_id_tiled(params, dst, cur_a,"),
)


class PatchFailed(Exception):
    """The vendored llama.cpp is not the one this patch was written for."""


def patched(text: str) -> str:
    """``ggml-cpu.c``'s text with the switch in it."""
    for old, new in EDITS:
        n = text.count(old)
        if n != 1:
            raise PatchFailed(f"ggml-cpu.c has {n} copies of a line the batch-kernels switch edits "
                              f"({old.strip().splitlines()[0]!r}); update scripts/ggml_patch.py for this llama.cpp")
        text = text.replace(old, new)
    return text


def patch(src: Path) -> None:
    """Put the switch into the extracted llama-cpp-python sdist at ``src``."""
    f = src / CPU_C
    if not f.is_file():
        raise PatchFailed(f"{f} is missing: not a llama-cpp-python source tree")
    f.write_text(patched(f.read_text()))


def patched_source(python: str, version: str, where: Path, log=None) -> Path:
    """llama-cpp-python ``version``'s sdist, downloaded by ``python``'s pip (from its cache when it has
    it), extracted under ``where`` (created) with the switch in it: the tree a wheel is built from.
    pip's output goes to ``log`` (a file; None: this process's)."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "-q", "download", "--no-deps",
                    "--no-binary", ":all:", "-d", str(where), f"llama-cpp-python=={version}"], check=True,
                   stdout=log, stderr=subprocess.STDOUT if log is not None else None)
    sdist = next(where.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        # The "data" filter (no links out, no device files) where this Python has it (3.11.4+).
        tar.extractall(where, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    src = where / f"llama_cpp_python-{version}"
    patch(src)
    return src

"""tinyBLAS as a run-time switch (scripts/ggml_patch.py, ExactKernels): compiled into Hearth's build as
llama.cpp's own builds have it, off while a model in the exact profile is loaded."""
from __future__ import annotations

import ctypes
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.backends.llama.backend import LlamaCppBackend
from engine.backends.llama.params import ExactKernels

ROOT = Path(__file__).resolve().parent.parent


def _patch_module():
    spec = importlib.util.spec_from_file_location("hearth_ggml_patch", ROOT / "scripts" / "ggml_patch.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_patch_edits_each_line_once_and_refuses_a_source_it_was_not_written_for(tmp_path):
    gp = _patch_module()
    original = "\n// between\n".join(old for old, _ in gp.EDITS)
    out = gp.patched(original)
    assert all(new in out for _, new in gp.EDITS) and "int ggml_cpu_batch_kernels = 1;" in out
    assert out.count("params->threadpool->batch_kernels") == 4  # tinyBLAS twice, the tiled matmul twice
    with pytest.raises(gp.PatchFailed, match="0 copies"):
        gp.patched(original.replace(gp.EDITS[3][0], ""))
    with pytest.raises(gp.PatchFailed, match="2 copies"):
        gp.patched(original + gp.EDITS[0][0])
    with pytest.raises(gp.PatchFailed, match="not a llama-cpp-python source tree"):
        gp.patch(tmp_path)
    f = tmp_path / gp.CPU_C
    f.parent.mkdir(parents=True)
    f.write_text(original)
    gp.patch(tmp_path)
    assert f.read_text() == out
    with pytest.raises(gp.PatchFailed):  # twice is refused, not doubled
        gp.patch(tmp_path)


def test_the_installed_build_has_the_switch_and_the_exact_profile_holds_it_off(bundled_path):
    # set-up builds every runtime from the patched source; a wheel without the switch would run
    # Q8_0 prefill at ~0.6x llama.cpp's. Other tests' exact models may be loaded in this process
    # (session fixtures): the switch is on exactly when none is.
    assert ExactKernels.available()
    before = ExactKernels.holders()

    def state() -> tuple[int, bool]:
        return ExactKernels.holders() - before, ExactKernels.batch_kernels_on()

    assert state() == (0, before == 0)
    exact = LlamaCppBackend(bundled_path, n_ctx=256, exactness="exact")
    try:
        assert state() == (1, False)
        fast = LlamaCppBackend(bundled_path, n_ctx=256, exactness="fast")
        fast.close()
        assert state() == (1, False)  # the exact model is still loaded
        second = LlamaCppBackend(bundled_path, n_ctx=256, exactness="exact")
        assert state() == (2, False)
        second.close()
        assert state() == (1, False)
    finally:
        exact.close()
    assert state() == (0, before == 0)
    exact.close()  # a second close gives nothing back twice
    assert state() == (0, before == 0)
    with pytest.raises(Exception):
        LlamaCppBackend(bundled_path, n_ctx=256, exactness="exact", kv_type="q4_0", flash_attn=False)
    assert state() == (0, before == 0)  # a load that failed gave its hold back at once


@pytest.fixture(scope="module")
def f16_model(tmp_path_factory, bundled_path):
    """The bundled model in F16 (llama.cpp's own quantizer, in process): F16 matmuls are tinyBLAS's."""
    import llama_cpp as lc

    out = tmp_path_factory.mktemp("f16") / "smollm2-f16.gguf"
    params = lc.llama_model_quantize_default_params()
    params.ftype = 1  # LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True
    params.nthread = 2
    assert lc.llama_model_quantize(str(bundled_path).encode(), str(out).encode(), ctypes.byref(params)) == 0
    return out


def test_the_switch_decides_whether_a_batch_gives_what_single_steps_give(f16_model):
    # The exact profile's promise rests on this switch: with tinyBLAS, a prompt read as one batch gives
    # other logits than the same tokens read one at a time; without it, the very same bits.
    b = LlamaCppBackend(f16_model, n_ctx=256, exactness="exact")
    try:
        tokens = b.tokenize("The lighthouse keeper climbed the stairs every night", add_bos=True)

        def batch_and_steps() -> tuple[np.ndarray, np.ndarray]:
            b.truncate(0)
            batch = b.forward(tokens, all_logits=True)[-1].copy()
            b.truncate(0)
            for t in tokens:
                step = b.forward([t]).copy()
            return batch, step

        batch, step = batch_and_steps()
        assert np.array_equal(batch, step)  # the exact profile: held off
        switch = ExactKernels.switch()
        switch.value = 1  # what a fast model alone in the process runs with
        try:
            batch, step = batch_and_steps()
        finally:
            switch.value = 0
        assert not np.array_equal(batch, step)
        assert np.abs(batch - step).max() < 0.5  # the same model, summed in another order
    finally:
        b.close()


def test_the_bundle_refuses_tinyblas_without_its_switch_and_finds_it_in_this_build():
    spec = importlib.util.spec_from_file_location("hearth_packaging_build", ROOT / "packaging" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    ok = "CPU : AVX2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | BATCH_KERNELS_SWITCH = 1 |"
    build.check_portable(ok, "here")
    build.check_portable("CPU : AVX2 = 1 | OPENMP = 1 | BATCH_KERNELS_SWITCH = 0 |", "here")  # compiled out: exact
    no_switch = ok.replace("BATCH_KERNELS_SWITCH = 1", "BATCH_KERNELS_SWITCH = 0")
    amx = ok.replace("OPENMP = 1", "AMX_INT8 = 1")
    for bad, why in ((no_switch, "without Hearth's run-time switch"), (amx, "AMX_INT8")):
        with pytest.raises(SystemExit, match=why):
            build.check_portable(bad, "here")
    assert "BATCH_KERNELS_SWITCH = 1" in build.system_info()  # the venv's build, read as the bundle's is

"""Sizing beyond the search: the CLI, the window's quick estimate, the reality
check against what llama.cpp and transformers allocate, and the out-of-memory
retry. The planner itself is tests/test_sizing.py.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from engine.errors import ModelLoadError
from engine.sizing.hardware import MiB, simulated
from engine.sizing.memory import Config, estimate, kv_cells
from engine.sizing.plan import Choices, plan_for
from engine.loading.load import load_with_retry
from engine.sizing.reality import (check_against_report, compare_to_report, describe_change, is_device_failure,
                                   is_out_of_memory, smaller_plan)
from engine.sizing.shape import spec_from_gguf, specs_from_hf_dir


# -- the CLI ----------------------------------------------------------------------------

def test_cli_plan_prints_the_breakdown(capsys):
    from engine.cli import main

    assert main(["plan", "--model", "qwen2.5-14b-instruct", "--gpu", "8GiB", "--ram", "16GiB"]) == 0
    out = capsys.readouterr().out
    for row in ("weights on the GPU", "weights on the CPU", "KV cache", "compute buffers", "runtime overhead",
                "draft model", "prefix cache", "safety margin (10%)", "total", "available",
                "Status: fits with offload", "quantization", "context", "GPU layers", "not downloaded"):
        assert row in out, row


def test_cli_plan_json_and_exit_codes(capsys):
    from engine.cli import main

    assert main(["plan", "--model", "qwen2.5-14b-instruct", "--gpu", "none", "--ram", "8GiB", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["status"] == "does not fit" and not d["fits"] and d["alternatives"]
    assert {p["name"] for p in d["pools"]} == {"RAM"}
    assert main(["plan", "--model", "qwen2.5-0.5b-instruct", "--gpu", "8 parsecs"]) == 2
    assert "memory size" in capsys.readouterr().err


def test_cli_plan_counts_the_api_streams_and_the_profile(capsys):
    from engine.cli import main

    runs = {}
    for args in (["--exactness", "exact"], ["--exactness", "fast"], ["--exactness", "fast", "--parallel", "4"]):
        assert main(["plan", "--ctx", "8192", "--gpu", "none", "--ram", "16GiB", "--draft", "none", "--json",
                     *args]) == 0
        runs[" ".join(args)] = json.loads(capsys.readouterr().out)
    exact, fast, pooled = runs.values()
    assert (exact["config"]["flash_attn"], fast["config"]["flash_attn"]) == (False, True)
    assert fast["pools"][0]["compute"] < exact["pools"][0]["compute"]  # no score matrix at 8k
    assert (pooled["config"]["parallel"], pooled["config"]["n_seq"]) == (4, 5)
    assert pooled["pools"][0]["kv"] == 5 * fast["pools"][0]["kv"]
    assert main(["plan", "--parallel", "-1"]) == 2
    assert "--parallel" in capsys.readouterr().err


def test_plan_for_the_bundled_model_on_this_machine(bundled_path):
    p = plan_for(None)
    assert p.fits and p.spec.quant == "Q4_1" and p.n_ctx == 8192
    assert p.to_config().n_ctx == 8192


def test_the_windows_quick_estimate_is_the_planners_own(bundled_path):
    """engine/loading/estimate.py asks the planner's memory model; it keeps no estimate of its own."""
    from engine.loading.estimate import quick_estimate as quick
    from engine.models.gguf import model_info

    info = model_info(bundled_path)
    for n_ctx in (1000, 2048, 8192):  # 1000 is padded to llama.cpp's 256-cell KV blocks
        est = quick(info, n_ctx)
        ram = estimate(Config(spec_from_gguf(bundled_path), n_ctx, 0), simulated("none", "16GiB")).ram
        assert (est.weights, est.kv, est.total) == (ram.weights, ram.kv, ram.total)
        assert est.kv == kv_cells(n_ctx) * info.kv_bytes_per_token(2.0)
        assert est.compute > ram.compute > 0  # plus the runtime overhead and the safety margin


# -- checked against reality ----------------------------------------------------------------

def _report(weights, kv, compute, repack=0):
    return {"weights": weights + repack, "weights@CPU_Mapped": weights, "weights@CPU_REPACK": repack,
            "kv": kv, "kv@CPU": kv, "compute": compute, "compute@CPU": compute, "output": 600000}


def test_compare_ignores_the_repacked_duplicate_and_warns_past_the_margin(caplog):
    p = plan_for(None, simulated("none", "16GiB", cores=8), Choices(n_ctx=2048))
    parts = p.breakdown.parts
    exact = _report(parts["weights"], parts["kv"], parts["compute"], repack=50 * MiB)
    r = check_against_report(p, exact)
    assert r["max_rel_error"] == 0 and r["within_margin"]
    with caplog.at_level(logging.WARNING, logger="hearth.sizing"):
        r = check_against_report(p, _report(parts["weights"], parts["kv"], int(parts["compute"] * 1.5)))
    assert not r["within_margin"] and r["rel_error"]["compute"] == pytest.approx(-1 / 3, abs=1e-3)
    assert "off by -33% on compute" in caplog.text


def test_gpu_buffers_are_compared_per_device():
    p = plan_for("qwen2.5-1.5b-instruct", simulated("8GiB", "16GiB", cores=8), Choices(n_ctx=4096, draft="none"))
    g = p.breakdown.gpus[0]
    rep = {"weights": g.weights + p.breakdown.ram.weights, "weights@CUDA0": g.weights,
           "weights@CPU_Mapped": p.breakdown.ram.weights, "kv": g.kv, "kv@CUDA0": g.kv,
           "compute": g.compute + p.breakdown.ram.compute, "compute@CUDA0": g.compute,
           "compute@CUDA_Host": p.breakdown.ram.compute}
    r = compare_to_report(p.breakdown, rep)
    assert r["rel_error"]["weights_gpu"] == 0 and r["rel_error"]["compute_gpu"] == 0


def test_out_of_memory_retries_once_with_the_next_smaller_plan():
    p = plan_for("qwen2.5-7b-instruct", simulated("8GiB", "32GiB", cores=8))
    calls = []

    def load(plan):
        calls.append(plan)
        if len(calls) == 1:
            raise ModelLoadError("not enough memory to create a 32768-token context for x.gguf "
                                 "(CUDA0: failed to allocate buffer)")
        return "engine"

    result, used, msg = load_with_retry(load, p)
    assert result == "engine" and len(calls) == 2 and used is not p
    assert used.breakdown.gpus[0].total <= 0.85 * p.breakdown.gpus[0].total + 1
    assert msg.startswith("Out of memory with the first plan; loaded with ") and "->" in msg
    assert describe_change(p, used) in msg


def test_out_of_memory_retry_keeps_explicit_choices_and_gives_up_clearly():
    p = plan_for("qwen2.5-0.5b-instruct", simulated("8GiB", "32GiB", cores=8),
                 Choices(quant="Q8_0", n_ctx=4096, n_gpu_layers=25, kv_type="f16", draft="none", prefix_cache=0))
    assert smaller_plan(p, ModelLoadError("CUDA out of memory")) is None

    def load(plan):
        raise ModelLoadError("not enough memory to load the model for x.gguf (cudaMalloc failed)")
    with pytest.raises(ModelLoadError, match="no smaller plan"):
        load_with_retry(load, p)

    def other(plan):
        raise ModelLoadError("llama.cpp could not load the model: bad tensor")
    with pytest.raises(ModelLoadError, match="bad tensor"):
        load_with_retry(other, p)
    assert is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_out_of_memory(ModelLoadError("unknown model architecture"))


# -- real loads: predicted KV and compute against llama.cpp's buffers -----------------------

def _check_real(path: Path, contexts, profiles=("exact", "fast")):
    from engine.bench.sizing import measure

    for profile in profiles:
        for n_ctx in contexts:
            r = measure(path, n_ctx, n_threads=2, exactness=profile)
            assert r["flash_attn"] == (profile == "fast")  # on the CPU, the fast profile's alone
            for part in ("kv", "compute", "weights"):
                assert abs(r["rel_error"][part]) <= 0.10, (path.name, profile, n_ctx, part, r)


def test_bundled_model_buffers_match_the_prediction(bundled_path):
    _check_real(bundled_path, (1000, 4096))


def test_the_compute_buffer_is_right_at_2k_8k_and_32k_in_both_profiles(bundled_path):
    """Issue #57: the plan read +69% on compute at 8k in the fast profile, which computes attention
    with flash attention (no score matrix) where the plan counted the exact profile's scores.
    32k is past SmolLM2's training context; llama.cpp allocates it all the same."""
    _check_real(bundled_path, (2048, 8192, 32768))


def test_flash_attention_follows_the_profile(bundled_path):
    spec = spec_from_gguf(bundled_path)
    fast, exact = (Config(spec, 32768, 0, "f16", exactness=e) for e in ("fast", "exact"))
    assert fast.flash_attn and not exact.flash_attn
    assert Config(spec, 32768, 0, "q8_0", exactness="exact").flash_attn  # a quantized V cache needs it
    assert Config(spec, 32768, 1, "f16", exactness="exact").flash_attn   # llama.cpp's auto with a GPU
    hw = simulated("none", "16GiB")
    ub, cells = 512, 32768
    # fast: the logits and three hidden vectors per token of the micro-batch (no score matrix at 32k)
    assert estimate(fast, hw).ram.compute == ub * 4 * (spec.n_vocab + 3 * spec.n_embd)
    # exact: the f32 scores of every head and the mask over 32768 cells, and the live vectors
    rest = 5 * spec.n_embd + 2 * spec.n_kv_heads * spec.head_dim
    assert estimate(exact, hw).ram.compute == ub * 4 * (cells * (spec.n_heads + 1) + rest)


def test_bundled_model_other_batch_sizes_and_kv_types(bundled_path):
    from engine.bench.sizing import measure

    for profile in ("exact", "fast"):
        for n_ctx, n_batch, kv in ((3000, 256, "f16"), (8192, 64, "f16"), (4096, 512, "q8_0"), (2048, 128, "q4_0")):
            r = measure(bundled_path, n_ctx, n_batch=n_batch, kv_type=kv, n_threads=2, exactness=profile)
            assert r["max_rel_error"] <= 0.10, r


def _bench_path(which: str) -> Path:
    from engine.models import catalogue as models

    p = models.bench_model_path(getattr(models, which))
    assert p is not None, f"{which} is not here: scripts/test.sh fetches it (python -m engine models fetch-bench-pair)"
    return p


@pytest.mark.slow
@pytest.mark.parametrize("which", ["BENCH_DRAFT", "BENCH_TARGET"])
def test_qwen_buffers_match_the_prediction(which):
    _check_real(_bench_path(which), (2048, 8192, 32768))


def test_load_ref_names_the_planned_file():
    hw = simulated("8GiB", "32GiB", cores=8)
    assert plan_for("qwen2.5-7b-instruct", hw).load_ref() == "Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M"
    assert plan_for("qwen2.5-7b-instruct", hw, Choices(quant="int4")).load_ref() == "Qwen/Qwen2.5-7B-Instruct"


@pytest.mark.parametrize("exactness, parallel", [("exact", 0), ("fast", 0), ("fast", 4)])
def test_the_planned_load_plans_loads_and_checks(bundled_path, caplog, exactness, parallel):
    """The window's load: no "memory plan ... was off" warning for a right plan, in either profile
    (the fast profile's read +69% on compute at 8k at every start), with or without the server's
    sequences (today opened in a context of their own after the load: the check compares the
    context that was opened)."""
    from engine.loading.load import load_model
    from engine.sizing.load_spec import LoadSpec

    req = LoadSpec(model=str(bundled_path), context=8192, draft="none", exactness=exactness,
                      server_parallel=parallel)
    with caplog.at_level(logging.WARNING, logger="hearth.sizing"):
        result = load_model(req, data_dir=None, n_threads=2, hardware=simulated("none", "16GiB", cores=2))
    engine, plan = result.engine, result.plan
    try:
        assert engine.backend.n_ctx == 8192 and plan.fits and result.messages == []
        assert plan.config.exactness == exactness and plan.config.parallel == parallel
        assert result.check["within_margin"] and result.check["max_rel_error"] <= 0.02, result.check
        assert "memory plan" not in caplog.text
        assert engine.cache.budget_bytes == plan.prefix_cache
    finally:
        engine.close()


def test_transformers_weights_match_the_hf_backend_on_the_cpu(tmp_path):
    """The safetensors-header estimate against what engine/backends/hf.py really
    holds: float32 on the CPU for 'none', bitsandbytes' packed sizes for int8/int4."""
    pytest.importorskip("torch")
    pytest.importorskip("bitsandbytes")
    from tiny_hf import make_tiny_model

    from engine.backends import hf

    folder = make_tiny_model(tmp_path / "tiny", layers=4, hidden=256)
    specs = {s.quant: s for s in specs_from_hf_dir(folder)}
    hw = simulated("none", "16GiB", cores=2)
    for quant in ("none", "int8", "int4"):
        b = hf.load(folder, quant=quant, device="cpu", n_ctx=512, n_threads=2)
        try:
            actual = b.memory_report()["weights"]
        finally:
            b.close()
        predicted = estimate(Config(specs[quant], 512, 0, "f32"), hw).ram.weights
        assert abs(predicted - actual) / actual <= 0.05, (quant, predicted, actual)


def test_the_planned_load_carries_out_a_transformers_plan(tmp_path):
    pytest.importorskip("torch")
    from tiny_hf import make_tiny_model

    from engine.loading.load import load_model
    from engine.sizing.load_spec import LoadSpec

    folder = make_tiny_model(tmp_path / "tiny", layers=2, hidden=128)
    req = LoadSpec(model=str(folder), source="hf_dir", quant="none", context=256, draft="none")
    result = load_model(req, data_dir=None, n_threads=2, hardware=simulated("none", "16GiB", cores=2))
    engine, plan = result.engine, result.plan
    try:
        assert engine.backend.name == "hf" and plan.to_config(engine.config).device == "cpu"
        assert engine.config.device == "cpu"
        assert result.messages == [] and result.check["within_margin"], result.check  # weights within the margin
    finally:
        engine.close()


# -- out of memory as llama.cpp reports it ----------------------------------------------------

# The lines ggml and llama.cpp log (ggml-alloc.c, llama-kv-cache.cpp, llama-context.cpp, ggml-cuda.cu
# in llama-cpp-python 0.3.36) when the KV cache does not fit on a device: the last error line names
# no device, the allocation's line does.
KV_ON_VULKAN = ["llama_context: constructing llama_context\n",
                "alloc_tensor_range: failed to allocate Vulkan0 buffer of size 3221225472\n",
                "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache\n"]
WEIGHTS_ON_CUDA = ["ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: "
                   "cudaMalloc failed: out of memory\n",
                   "alloc_tensor_range: failed to allocate CUDA0 buffer of size 4294967296\n",
                   "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n"]
COMPUTE_ON_CPU = ["ggml_gallocr_reserve_n: failed to allocate CPU buffer of size 9663676416\n",
                  "graph_reserve: failed to allocate compute buffers\n"]


def _load_failure(lines, what="create a 32768-token context") -> ModelLoadError:
    from types import SimpleNamespace

    from engine.backends.llama.backend import LlamaCppBackend

    with pytest.raises(ModelLoadError) as e:
        LlamaCppBackend._raise_load_failure(SimpleNamespace(path=Path("x.gguf")), lines, what)
    return e.value


def test_a_device_allocation_failure_names_the_device_and_the_retry_shrinks_the_gpu():
    from engine.backends.llama.log import failed_allocation_device

    assert failed_allocation_device(KV_ON_VULKAN) == "Vulkan0"
    assert failed_allocation_device(WEIGHTS_ON_CUDA) == "CUDA0"  # the indexed name over cudaMalloc's "CUDA"
    assert failed_allocation_device(COMPUTE_ON_CPU) == "CPU"
    assert failed_allocation_device(["llama_model_load: error loading model: bad tensor\n"]) is None

    kv = _load_failure(KV_ON_VULKAN)
    assert str(kv).startswith("not enough memory on Vulkan0 to create a 32768-token context for x.gguf")
    assert is_out_of_memory(kv)
    hw = simulated("8GiB", "32GiB", cores=8)
    p = plan_for("qwen2.5-7b-instruct", hw)
    smaller = smaller_plan(p, kv)
    # The GPU's share shrinks (it is the GPU that ran out), not the RAM's: before, the KV's error named
    # no device, and the retry planned as if RAM had run out, which left the GPU plan as it was.
    assert smaller is not None and smaller.breakdown.gpus[0].total <= 0.85 * p.breakdown.gpus[0].total + 1
    assert smaller.hardware.ram_available == p.hardware.ram_available
    weights = _load_failure(WEIGHTS_ON_CUDA, "load the model")
    assert "on CUDA0 to load the model" in str(weights) and is_out_of_memory(weights)
    ram = _load_failure(COMPUTE_ON_CPU)
    assert str(ram).startswith("not enough memory to create") and is_out_of_memory(ram)
    assert smaller_plan(p, ram).hardware.ram_available < p.hardware.ram_available


def test_a_decode_that_cannot_allocate_is_out_of_memory():
    from engine.backends.llama.log import decode_error

    # llama_decode returns -2 for GGML_STATUS_ALLOC_FAILED: the window's retry must see it as memory.
    assert is_out_of_memory(decode_error(-2, 512)) and "batch of 512 tokens" in str(decode_error(-2, 512))
    assert not is_out_of_memory(decode_error(-3, 512)) and is_device_failure(decode_error(-3, 512))
    # The device is read from the decode's own log lines (through llama.cpp's log callback), not
    # from whatever another engine logged before.
    from engine.backends.llama import log as llama_log

    mark = llama_log._log_mark()
    llama_log._on_log(4, b"ggml_gallocr_reserve_n: failed to allocate Vulkan0 buffer of size 104857600\n", None)
    assert str(decode_error(-2, 8, mark)).startswith("not enough memory on Vulkan0 to compute a batch of 8")
    assert "Vulkan0" not in str(decode_error(-2, 8, llama_log._log_mark()))


def test_a_context_larger_than_memory_fails_to_load_with_a_clear_out_of_memory(bundled_path):
    # A real llama.cpp allocation failure: a 40M-token KV cache (~900 GiB), more than any machine has.
    # Linux refuses an allocation larger than RAM + swap under its default overcommit heuristic (0)
    # or strict accounting (2); with overcommit 1 it would be granted and the test killed instead.
    from engine import Engine
    from engine.config import EngineConfig

    mode = Path("/proc/sys/vm/overcommit_memory").read_text().strip()
    assert mode in ("0", "2"), f"vm.overcommit_memory={mode}: this machine grants any allocation"
    with pytest.raises(ModelLoadError) as e:
        Engine.open(EngineConfig(bundled_path, n_ctx=40_000_000, n_threads=2, cache_budget=0))
    assert str(e.value).startswith("not enough memory to create a 40000000-token context for ")
    assert is_out_of_memory(e.value)

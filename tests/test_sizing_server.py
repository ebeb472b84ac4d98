"""The local server's sequences in the memory plan: the model's one context holds the window's
sequence and ``parallel`` API sequences, each in a KV stream of the whole context, with one compute
buffer. The figures are checked on simulated machines, against llama.cpp's own allocation, and
through ``engine serve``."""
from __future__ import annotations

import pytest

from engine.errors import HearthError
from engine.sizing import load_machine as planning
from engine.sizing.load_spec import LoadSpec
from engine.sizing.load_plan import choices, plan_spec
from engine.sizing.hardware import GiB, simulated
from engine.sizing.memory import MARGIN, Config, attention_peak, estimate, kv_cells, kv_layer_bytes
from engine.sizing.shape import spec_from_gguf


@pytest.fixture(scope="module")
def spec(bundled_path):
    return spec_from_gguf(bundled_path)


def test_the_pool_holds_a_kv_stream_per_sequence_and_one_compute_buffer(spec):
    hw = simulated("none", "16GiB", cores=8)
    alone = estimate(Config(spec, 1000, 0, "f16", exactness="exact"), hw)
    pooled = estimate(Config(spec, 1000, 0, "f16", parallel=4, exactness="exact"), hw)
    stream = kv_layer_bytes(spec, kv_cells(1000), "f16") * spec.n_layers  # 1024 cells of 30 layers
    assert alone.ram.kv == stream and pooled.ram.kv == 5 * stream  # the window's and 4 API streams
    assert pooled.ram.compute == alone.ram.compute  # one compute buffer: at 1k the logits are the peak
    assert pooled.ram.subtotal - alone.ram.subtotal == 4 * stream
    assert pooled.parts == {**alone.parts, "kv": 5 * stream}  # the one context the check compares


def test_the_streams_share_the_micro_batch_in_the_scores(spec):
    """Without flash attention at a long context the scores are the peak; llama.cpp reserves the
    micro-batch rounded up to a multiple of the sequences (512 -> 515 tokens for 5)."""
    hw = simulated("none", "16GiB", cores=8)
    alone = estimate(Config(spec, 8192, 0, "f16", exactness="exact"), hw).ram.compute
    five = estimate(Config(spec, 8192, 0, "f16", parallel=4, exactness="exact"), hw).ram.compute
    four = estimate(Config(spec, 8192, 0, "f16", parallel=3, exactness="exact"), hw).ram.compute
    assert alone == attention_peak(spec, 512, 8192, False) and four == alone
    assert five == attention_peak(spec, 512, 8192, False, n_seq=5) and five * 512 == alone * 515


def test_on_a_split_model_each_pool_holds_its_own_layers_streams(spec):
    hw = simulated("8GiB", "16GiB", cores=8)
    k = 11  # the head and 10 blocks on the GPU, 20 blocks on the CPU
    alone = estimate(Config(spec, 2048, k, "f16"), hw)
    pooled = estimate(Config(spec, 2048, k, "f16", parallel=3), hw)
    per_layer = kv_layer_bytes(spec, 2048, "f16")
    gpu, ram = pooled.gpus[0], pooled.ram
    assert (gpu.layers, ram.layers) == (10, 20)
    assert (gpu.kv, ram.kv) == (4 * 10 * per_layer, 4 * 20 * per_layer)
    assert (gpu.compute, ram.compute) == (alone.gpus[0].compute, alone.ram.compute)


def test_a_load_request_plans_its_server_parallel(monkeypatch, bundled_path, spec):
    hw = simulated("none", "16GiB", cores=2)
    monkeypatch.setattr(planning, "machine", lambda fmt, **_kw: hw)
    base = plan_spec(LoadSpec(context=2048, draft="none"), planning.machine("gguf"))
    served = plan_spec(LoadSpec(context=2048, draft="none", server_parallel=4), planning.machine("gguf"))
    assert base is not None and served is not None
    assert served.config.parallel == 4 and base.config.parallel == 0 and served.config.n_seq == 5
    kv = 4 * kv_layer_bytes(spec, 2048, "f16") * spec.n_layers
    grew = served.breakdown.ram.subtotal - base.breakdown.ram.subtotal
    assert grew == kv  # 4 x 45 MiB of KV; no second compute buffer
    assert served.breakdown.ram.total - base.breakdown.ram.total == grew + int(
        served.breakdown.ram.subtotal * MARGIN) - int(base.breakdown.ram.subtotal * MARGIN)
    from engine.sizing.report import plan_dict, render_table

    assert "KV cache (f16, window + 4 API streams)" in render_table(served)
    assert "KV cache (f16)" in render_table(base) and "API stream" not in render_table(base)
    config = plan_dict(served)["config"]
    assert (config["parallel"], config["n_seq"]) == (4, 5)
    assert plan_dict(served)["pools"][-1]["kv"] == 5 * kv_layer_bytes(spec, 2048, "f16") * spec.n_layers


def test_too_little_memory_for_the_batch_gives_up_context_first(monkeypatch, spec):
    hw = simulated("none", "1GiB", cores=2)
    monkeypatch.setattr(planning, "machine", lambda fmt, **_kw: hw)
    alone = plan_spec(LoadSpec(draft="none"), planning.machine("gguf"))
    served = plan_spec(LoadSpec(draft="none", server_parallel=8), planning.machine("gguf"))
    assert alone is not None and served is not None and alone.fits and served.fits
    assert served.n_ctx < alone.n_ctx  # 8 streams of the whole context do not fit in 1 GiB beside the model
    assert served.breakdown.ram.total <= 1 * GiB


def test_server_parallel_is_checked_and_not_a_saved_setting():
    with pytest.raises(HearthError, match="server_parallel"):
        LoadSpec(server_parallel=-1)
    req = LoadSpec(server_parallel=2)
    assert "server_parallel" not in req.as_dict() and req.plain().server_parallel == 2
    assert choices(req, "gguf").parallel == 2


@pytest.mark.parametrize("exactness", ["exact", "fast"])
def test_the_plan_matches_what_llamacpp_allocates_for_the_pool(bundled_path, exactness):
    """One context of 1 + N sequences, a KV stream each, as the engine core opens it, against
    today's two (the window's, and the server's batch context of N streams)."""
    from engine.bench.sizing_pool import measure_pool

    for n_ctx, parallel in ((1024, 1), (2048, 3), (8192, 4)):
        r = measure_pool(bundled_path, n_ctx, parallel, exactness=exactness, n_threads=1)
        stream = kv_layer_bytes(spec_from_gguf(bundled_path), kv_cells(n_ctx), "f16") * 30
        assert r["pool"]["kv"] == (1 + parallel) * stream  # to the byte
        assert r["window"]["kv"] + r["batch_context"]["kv"] == r["pool"]["kv"]
        assert r["plan_rel_error"]["kv"] == 0 and r["plan_rel_error"]["weights"] == 0
        assert r["max_rel_error"] <= 0.05, r  # the compute buffer, one for every stream
        # the same streams, one compute buffer fewer than the window's context beside a batch context
        assert r["today_allocated"] - r["pool_allocated"] == pytest.approx(r["window"]["compute"], rel=0.02)
        assert abs(r["pool_planned"] - r["pool_allocated"]) <= 0.05 * r["pool_allocated"]


def test_the_reality_check_compares_the_context_that_was_opened(bundled_path, spec):
    """Today the window's context holds one sequence and the server opens its own later: a plan for
    the window and 4 API streams is checked against a one-sequence load as such, and against a
    five-sequence load as the pool."""
    from engine.sizing.plan import Choices, plan_for
    from engine.sizing.reality import check_against_report

    hw = simulated("none", "16GiB", cores=2)
    plan = plan_for(bundled_path, hw, Choices(n_ctx=2048, draft="none", parallel=4))
    parts = estimate(Config(spec, 2048, 0, "f16"), hw).parts
    one = {"n_seq": 1, "weights": parts["weights"], "kv": parts["kv"], "compute": parts["compute"]}
    assert check_against_report(plan, one)["max_rel_error"] == 0
    five = {**one, "n_seq": 5, "kv": 5 * parts["kv"]}
    assert check_against_report(plan, five)["max_rel_error"] == 0
    assert check_against_report(plan, {**one, "n_seq": 5})["rel_error"]["kv"] == 4.0  # a pool without streams


def test_engine_serve_plans_with_its_parallel(monkeypatch):
    from engine.cli import main
    from engine.loading import load

    asked: list[LoadSpec] = []

    def fake_load(req, **_kw):
        asked.append(req)
        raise HearthError("stop here: the request is what this test reads")

    monkeypatch.setattr(load, "load_model", fake_load)
    assert main(["serve", "--port", "0", "--parallel", "3", "--ctx", "1024"]) != 0  # the CLI reports the error
    assert [(r.server_parallel, r.context) for r in asked] == [(3, 1024)]

"""The local server's batch context in the memory plan: ``server_parallel`` sequences each get a
KV stream of the engine's context, and the context its own compute buffer. The figures are checked
on simulated machines, against llama.cpp's own allocation, and through ``engine serve``."""
from __future__ import annotations

import pytest

from engine.errors import HearthError
from engine.loading import plan as planning
from engine.loading.request import LoadRequest
from engine.sizing.hardware import GiB, simulated
from engine.sizing.memory import MARGIN, Config, estimate, kv_cells, kv_layer_bytes
from engine.sizing.shape import spec_from_gguf


@pytest.fixture(scope="module")
def spec(bundled_path):
    return spec_from_gguf(bundled_path)


def test_the_batch_context_adds_parallel_kv_streams_and_a_compute_buffer(spec):
    hw = simulated("none", "16GiB", cores=8)
    alone = estimate(Config(spec, 1000, 0, "f16"), hw)
    served = estimate(Config(spec, 1000, 0, "f16", server_parallel=4), hw)
    kv = 4 * kv_layer_bytes(spec, kv_cells(1000), "f16") * spec.n_layers  # 4 streams of 1024 cells
    assert kv == 4 * alone.ram.kv
    assert served.ram.batch == kv + alone.ram.compute
    assert served.ram.subtotal - alone.ram.subtotal == served.ram.batch
    assert served.ram.total - alone.ram.total == served.ram.batch + (served.ram.margin - alone.ram.margin)
    assert served.parts == alone.parts  # opened after the load: the load's reality check leaves it out
    assert alone.ram.batch == 0


def test_on_a_split_model_each_pool_holds_its_own_layers_streams(spec):
    hw = simulated("8GiB", "16GiB", cores=8)
    k = 11  # the head and 10 blocks on the GPU, 20 blocks on the CPU
    alone = estimate(Config(spec, 2048, k, "f16"), hw)
    served = estimate(Config(spec, 2048, k, "f16", server_parallel=3), hw)
    per_layer = kv_layer_bytes(spec, 2048, "f16")
    gpu, ram = served.gpus[0], served.ram
    assert (gpu.layers, ram.layers) == (10, 20)
    assert gpu.batch == 3 * 10 * per_layer + alone.gpus[0].compute
    assert ram.batch == 3 * 20 * per_layer + alone.ram.compute
    assert sum(p.batch for p in served.pools) - sum(p.compute for p in alone.pools) == 3 * spec.n_layers * per_layer


def test_a_load_request_plans_its_server_parallel(monkeypatch, bundled_path, spec):
    hw = simulated("none", "16GiB", cores=2)
    monkeypatch.setattr(planning, "machine", lambda fmt, **_kw: hw)
    base = planning.plan_request(LoadRequest(context=2048, draft="none"))
    served = planning.plan_request(LoadRequest(context=2048, draft="none", server_parallel=4))
    assert base is not None and served is not None
    assert served.config.server_parallel == 4 and base.config.server_parallel == 0
    kv = 4 * kv_layer_bytes(spec, 2048, "f16") * spec.n_layers
    grew = served.breakdown.ram.subtotal - base.breakdown.ram.subtotal
    assert grew == kv + base.breakdown.ram.compute  # 4 x 45 MiB of KV, one compute buffer
    assert served.breakdown.ram.total - base.breakdown.ram.total == grew + int(
        served.breakdown.ram.subtotal * MARGIN) - int(base.breakdown.ram.subtotal * MARGIN)
    from engine.sizing.report import plan_dict, render_table

    assert "server batch (4 x context)" in render_table(served) and "server batch" not in render_table(base)
    assert plan_dict(served)["pools"][-1]["batch"] == served.breakdown.ram.batch


def test_too_little_memory_for_the_batch_gives_up_context_first(monkeypatch, spec):
    hw = simulated("none", "1GiB", cores=2)
    monkeypatch.setattr(planning, "machine", lambda fmt, **_kw: hw)
    alone = planning.plan_request(LoadRequest(draft="none"))
    served = planning.plan_request(LoadRequest(draft="none", server_parallel=8))
    assert alone is not None and served is not None and alone.fits and served.fits
    assert served.n_ctx < alone.n_ctx  # 8 streams of the whole context do not fit in 1 GiB beside the model
    assert served.breakdown.ram.total <= 1 * GiB


def test_server_parallel_is_checked_and_not_a_saved_setting():
    with pytest.raises(HearthError, match="server_parallel"):
        LoadRequest(server_parallel=-1)
    req = LoadRequest(server_parallel=2)
    assert "server_parallel" not in req.as_dict() and req.plain().server_parallel == 2
    assert planning.choices_for(req, "gguf").server_parallel == 2


def test_engine_serve_plans_with_its_parallel(monkeypatch):
    from engine.cli import main
    from engine.loading import load

    asked: list[LoadRequest] = []

    def fake_load(req, **_kw):
        asked.append(req)
        raise HearthError("stop here: the request is what this test reads")

    monkeypatch.setattr(load, "load_model", fake_load)
    assert main(["serve", "--port", "0", "--parallel", "3", "--ctx", "1024"]) != 0  # the CLI reports the error
    assert [(r.server_parallel, r.context) for r in asked] == [(3, 1024)]

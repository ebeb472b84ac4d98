"""engine/sizing/load_spec.py and load_plan.py: one LoadSpec with one AUTO, and plan_load(), the one
shape change from what the user chose to the frozen EngineConfig. plan_load gives the config the
older path (LoadRequest -> plan_request -> engine_config) gave, on the real bundled model's header."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from engine.errors import HearthError
from engine.loading import request_plan as planning
from engine.loading.request import LoadRequest
from engine.sizing.hardware import simulated
from engine.sizing.load_plan import plan_load
from engine.sizing.load_spec import AUTO, LoadSpec

CPU = simulated("none", "16GiB", cores=2)
GPU = simulated("8GiB", "16GiB", cores=2)

# (the older request, the same load as a spec, the machine): the bundled model on Auto, an explicit
# context, every layer on the GPU, this once on the CPU, and a fixed KV type and thread count.
CASES = [
    (LoadRequest(), LoadSpec(), CPU),
    (LoadRequest(), LoadSpec(), GPU),
    (LoadRequest(context=1024), LoadSpec(context=1024), CPU),
    (LoadRequest(gpu_layers="all", context=2048), LoadSpec(gpu_layers="all", context=2048), GPU),
    (LoadRequest(gpu_layers=0), LoadSpec(gpu_layers=0), GPU),
    (LoadRequest(kv_type="q8_0", n_threads=3, threads_poll=50, draft="none", server_parallel=2),
     LoadSpec(kv_type="q8_0", n_threads=3, threads_poll=50, draft="none", server_parallel=2), CPU),
]


@pytest.mark.parametrize("req,spec,hw", CASES)
def test_plan_load_gives_the_config_the_older_path_gave(req, spec, hw, tmp_path):
    ref = req.model_ref()
    old_plan = planning.plan_request(req, hardware=hw)
    old = planning.engine_config(old_plan, req, ref, "llama_cpp", req.n_threads or 2, tmp_path,
                                 req.threads_poll if req.threads_poll is not None else 10)
    config, plan = plan_load(spec, hw, data_dir=tmp_path, n_threads=2, threads_poll=10)
    assert plan is not None and old_plan is not None and plan.summary() == old_plan.summary()
    assert config == old


def test_plan_load_with_the_resolved_model_plans_that_file(bundled_path):
    spec = LoadSpec(context=1024)
    config, plan = plan_load(spec, CPU, ref=spec.model_ref(), backend="llama_cpp")
    assert plan is not None and plan.spec.source == str(bundled_path)
    assert (config.n_ctx, config.n_gpu_layers, config.disk_cache, config.n_threads) == (1024, 0, None, None)


def test_auto_is_one_value_and_auto_is_its_text():
    spec = LoadSpec(backend="auto", draft="auto", kv_type="auto")
    assert spec == LoadSpec() and all(getattr(spec, k) is AUTO for k in ("backend", "context", "gpu_layers"))
    with pytest.raises(HearthError, match="AUTO lets Hearth choose"):
        LoadSpec(context=None)  # type: ignore[arg-type]
    for bad in ({"gpu_layers": -1}, {"gpu_layers": "most"}, {"context": 0}, {"n_threads": True}):
        with pytest.raises(HearthError):
            LoadSpec(**bad)  # type: ignore[arg-type]


def test_a_spec_round_trips_through_json_with_auto_kept():
    spec = LoadSpec(model="/m/x.gguf", source="gguf", gpu_layers="all", workers=("a:1",), cpu_only="why",
                    retry_after="oom", server_parallel=3)
    d = json.loads(json.dumps(spec.as_dict()))
    assert d["context"] == d["kv_type"] == d["n_threads"] == "auto" and d["gpu_layers"] == "all"
    assert not {"cpu_only", "retry_after", "server_parallel", "prefix_cache", "n_batch"} & set(d)
    assert LoadSpec.from_dict(d) == replace(spec.plain(), server_parallel=0) == \
        LoadSpec(model="/m/x.gguf", source="gguf", gpu_layers="all", workers=("a:1",))


def test_a_spec_reads_what_older_files_wrote():
    # Auto was null before version 5; a first-version last_working held only the model and the context.
    old = LoadSpec.from_dict({"model": "bundled", "context": None, "gpu_layers": None, "n_threads": None,
                              "threads_poll": None, "backend": None, "exactness": None, "future_knob": 3})
    assert old == LoadSpec()
    assert LoadSpec.from_dict({"model": "bundled", "context": 1024}) == LoadSpec(context=1024)

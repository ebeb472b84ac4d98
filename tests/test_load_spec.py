"""engine/sizing/load_spec.py and load_plan.py: one LoadSpec with one AUTO, and plan_load(), the one
shape change from what the user chose to the frozen EngineConfig. plan_load gives the config the
older path (LoadSpec -> choices_for -> plan_for -> engine_config, kept below as the reference,
with None for Auto) gave, on the real bundled model's header."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from engine.config import EngineConfig
from engine.errors import HearthError
from engine.kv.disk_store import DEFAULT_DISK_BUDGET
from engine.models.catalogue import resolve
from engine.sizing.hardware import simulated
from engine.sizing.load_plan import choices as spec_choices, prefix_store_dir, plan_load
from engine.sizing.load_spec import AUTO, LoadSpec, or_auto
from engine.sizing.plan import Choices, plan_for

CPU = simulated("none", "16GiB", cores=2)
GPU = simulated("8GiB", "16GiB", cores=2)



def older_path(hw, data_dir, *, context=None, gpu_layers=None, kv_type="auto", n_threads=None, threads_poll=None,
               draft="auto", server_parallel=0, exactness="fast"):
    """The bundled GGUF's load as the older path made it (loading/request_plan.py's choices_for and
    engine_config before LoadSpec, with None for Auto, which Choices now spells AUTO as the spec does, and
    the caller's threads 2 and poll 10)."""
    gl = gpu_layers
    choices = Choices(quant=AUTO, n_ctx=or_auto(context), n_gpu_layers=(1 << 20) if gl == "all" else or_auto(gl),
                      kv_type=AUTO if kv_type == "auto" else kv_type, draft=AUTO if draft == "auto" else draft,
                      parallel=server_parallel, exactness=exactness)
    plan = plan_for(None, hw, choices)
    base = EngineConfig(model=resolve(None), backend="llama_cpp", n_threads=n_threads or 2,
                        threads_poll=threads_poll if threads_poll is not None else 10, exactness=exactness,
                        mmproj="auto", n_ctx=context, draft=draft, n_gpu_layers=-1 if gl == "all" else gl or 0,
                        kv_type="f16" if kv_type == "auto" else kv_type, quant="none",
                        disk_cache=prefix_store_dir(data_dir), disk_cache_bytes=DEFAULT_DISK_BUDGET)
    if draft != "none" and plan.config.draft is None and "draft" in plan.shortfalls:
        draft = "ngram"
    return replace(plan.to_config(base), draft=draft), plan


# The bundled model on Auto, an explicit context, every layer on the GPU, this once on the CPU, and a
# fixed KV type and thread count: (the older path's choices, the machine).
CASES = [({}, CPU), ({}, GPU), ({"context": 1024}, CPU), ({"gpu_layers": "all", "context": 2048}, GPU),
         ({"gpu_layers": 0}, GPU),
         ({"kv_type": "q8_0", "n_threads": 3, "threads_poll": 50, "draft": "none", "server_parallel": 2}, CPU)]


@pytest.mark.parametrize("chosen,hw", CASES)
def test_plan_load_gives_the_config_the_older_path_gave(chosen, hw, tmp_path):
    spec = LoadSpec(exactness="fast", **chosen)
    old, old_plan = older_path(hw, tmp_path, exactness="fast", **chosen)
    config, plan = plan_load(spec, hw, data_dir=tmp_path, n_threads=2, threads_poll=10)
    assert plan is not None and plan.summary() == old_plan.summary()
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


def test_the_planner_spells_auto_as_the_spec_does():
    """One spelling of Auto from Settings to the search: a spec's AUTO reaches Choices as AUTO, only a
    value the user fixed is explicit, and "all" GPU layers become llama.cpp's count."""
    auto = spec_choices(LoadSpec(), "gguf")
    knobs = ("quant", "n_ctx", "n_gpu_layers", "kv_type", "draft", "prefix_cache")
    assert all(getattr(auto, k) is AUTO for k in knobs) and auto.explicit() == frozenset()
    fixed = spec_choices(LoadSpec(context=2048, gpu_layers="all", draft="none", quant="int4"), "gguf")
    assert fixed.n_ctx == 2048 and fixed.n_gpu_layers > 1000 and fixed.draft == "none"
    assert fixed.quant is AUTO  # a GGUF carries its own quantization
    assert fixed.explicit() == {"context", "gpu_layers", "draft"}
    assert spec_choices(LoadSpec(quant="int4"), "hf").explicit() == {"quant", "draft"}  # hf: n-gram only
    plan = plan_for(None, CPU, fixed)
    assert plan.config.n_ctx == 2048 and plan.choices is fixed

"""engine/loading: the one planned load. A LoadSpec reads old settings files, plans on the
machine the backend sees, loads the real bundled model, keeps its records in the data folder it
is given, and the command line loads through it the way the window does."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from engine.errors import Cancelled, ModelFileError
from engine.sizing import load_machine as planning
from engine.loading.gpu_guard import GpuGuard
from engine.interface import ModelInfo
from engine.loading.load import PLAN_LOG, load_model
from engine.sizing.load_spec import AUTO, LoadSpec
from engine.sizing.load_plan import PREFIX_STORE, carry_out, plan_spec
from engine.sizing.hardware import simulated


def test_a_request_reads_what_older_settings_files_saved():
    # A first-version last_working: only the model and the context (no source, backend, quant, ...).
    old = LoadSpec.from_dict({"model": "bundled", "context": 1024})
    assert old == LoadSpec(context=1024)
    assert (old.model_source, old.backend, old.quant, old.kv_type, old.gpu_layers, old.exactness) == \
        ("bundled", AUTO, AUTO, AUTO, AUTO, "exact")
    # nulls where a later version wrote its defaults, and a key this version does not know
    odd = LoadSpec.from_dict({"model": "bundled", "backend": None, "kv_type": None, "future_knob": 3})
    assert odd == LoadSpec()
    req = LoadSpec(model="/m/x.gguf", source="gguf", gpu_layers="all", cpu_only="why", retry_after="oom")
    assert LoadSpec.from_dict(req.as_dict()) == req.plain() and "cpu_only" not in req.as_dict()
    assert req.plain() == replace(req, cpu_only=None, retry_after=None)


def test_an_old_settings_file_becomes_an_engine_config(tmp_path, bundled_path):
    """A settings file from a version before EngineConfig existed opens an engine from one config:
    the request as chosen, Auto filled in by the plan (``Plan.to_config``), the caller's threads."""
    from app.core.settings import SettingsFile

    from engine.config import EngineConfig

    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "model": "bundled", "context": 1024, "gpu_layers": None,
                                "last_working": {"model": "bundled", "context": 1024}}))
    settings, notice = SettingsFile(path).load()
    assert notice is None
    req = settings.load_spec()
    hw = simulated("none", "16GiB", cores=2)
    plan = plan_spec(req, hw)
    config = carry_out(plan, req, req.model_ref(), "llama_cpp", n_threads=2, data_dir=tmp_path)
    assert isinstance(config, EngineConfig) and config.ref.is_bundled
    assert (config.n_ctx, config.n_gpu_layers, config.kv_type, config.n_threads) == (1024, 0, plan.kv_type, 2)
    assert config.cache_budget == plan.prefix_cache and config.disk_cache == tmp_path / PREFIX_STORE
    assert plan.to_config(config) == config  # the plan's values are already in it
    with pytest.raises(Exception, match="n_ctx must be"):
        EngineConfig(n_ctx=0)  # a bad value fails when the config is made, before any file is read


def test_an_old_settings_file_with_last_working_still_loads_and_rolls_back(tmp_path):
    from app.core.settings import SettingsFile

    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "model": "bundled", "context": 2048,
                                "last_working": {"model": "bundled", "context": 1024}}))
    f = SettingsFile(path)
    settings, notice = f.load()
    assert notice is None and settings.context == 2048
    assert f.last_working == LoadSpec(context=1024)
    back = f.rolled_back(settings)
    assert back.load_spec() == LoadSpec(context=1024) and back.context == 1024
    f.mark_working(back)  # saved again in this version's form, and read back the same
    again = SettingsFile(path)
    again.load()
    assert again.last_working == back.load_spec()
    assert json.loads(path.read_text())["last_working"] == back.load_spec().as_dict()


def test_a_request_names_its_model_and_its_planner(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    assert LoadSpec().title == "the bundled model" and LoadSpec().plan_format == "gguf"
    assert LoadSpec(model="owner/repo:Q4_K_M").model_source == "hub"
    assert LoadSpec(model="owner/repo:Q4_K_M").title == "owner/repo:Q4_K_M"
    assert LoadSpec(model=str(folder)).model_source == "hf_dir"
    assert LoadSpec(model=str(folder)).plan_format == "hf"
    assert LoadSpec(backend="hf").plan_format is None  # a GGUF dequantized on transformers: no planner
    with pytest.raises(ModelFileError, match="not found"):
        LoadSpec(model=str(tmp_path / "missing.gguf"), source="gguf").model_ref()


def test_the_gpu_marker_lives_in_the_folder_it_is_given(tmp_path):
    a, b = GpuGuard(tmp_path / "a"), GpuGuard(tmp_path / "b")
    a.mark("running", device="Vulkan0")
    assert a.path.parent == tmp_path / "a" and a.path.exists() and not b.path.exists()
    b.clear()
    assert a.path.exists()
    a.clear()
    assert not a.path.exists()


def test_the_llamacpp_machine_is_the_devices_ggml_reports():
    # This CPU build registers no GPU with ggml: the plan is for system RAM, and says why.
    from engine.backends.llama.devices import gpu_devices

    hw = planning.machine("gguf")
    assert len(hw.gpus) == len(gpu_devices()) == 0
    assert any("no GPU device" in n for n in hw.notes)


def test_load_model_plans_loads_and_records_in_the_data_folder(tmp_path, monkeypatch):
    hw = simulated("none", "16GiB", cores=2)
    monkeypatch.setattr(planning, "machine", lambda fmt, **_kw: hw)
    result = load_model(LoadSpec(context=512, draft="none", n_threads=1), data_dir=tmp_path, n_threads=2)
    try:
        m = result.model
        assert isinstance(m, ModelInfo) and m.bundled and m.runtime == "cpu" and m.device == "CPU"
        local = m.local  # the request's threads win
        assert (m.n_ctx, local.n_threads, local.n_gpu_layers, local.draft) == (512, 1, 0, "none")
        assert result.plan is not None and result.plan.n_ctx == 512
        assert m.local.plan["summary"] == result.plan.summary()
        assert m.local.memory_total == sum(result.check["actual"][k] for k in ("weights", "kv", "compute"))
        (entry,) = [json.loads(line) for line in (tmp_path / PLAN_LOG).read_text().splitlines()]
        assert (entry["runtime"], entry["device"], entry["n_ctx"], entry["retried"]) == ("cpu", "CPU", 512, False)
        assert result.engine.kv.store is not None  # the disk prefix store is on, in the data folder
        assert not GpuGuard(tmp_path).path.exists()  # nothing on a device: no marker
    finally:
        result.engine.close()


def test_load_model_without_a_data_folder_keeps_no_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = load_model(LoadSpec(context=256, draft="none"), data_dir=None, n_threads=1)
    try:
        assert result.engine.kv.store is None and result.model.local.n_threads == 1
    finally:
        result.engine.close()
    assert list(tmp_path.iterdir()) == []


def test_a_load_cancelled_before_it_opens_the_model_says_so(tmp_path):
    import threading

    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        load_model(LoadSpec(), data_dir=tmp_path, cancel=cancel)


def test_engine_plan_plans_for_the_machine_the_window_plans_for(monkeypatch, capsys):
    from engine.cli import main

    hw = simulated("8GiB", "16GiB", cores=2)
    asked: list[str] = []
    monkeypatch.setattr(planning, "machine", lambda fmt, **_kw: asked.append(fmt) or hw)
    assert main(["plan", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert asked == ["gguf"] and plan["config"]["n_gpu_layers"] > 0
    assert [g["total"] for g in plan["hardware"]["gpus"]] == [8 * 2**30]

"""The window carries out the memory plan: Auto settings come from engine.sizing, fixed
ones stay as chosen, an out-of-memory load or reply retries with the next smaller plan,
the memory figure and the plan count the same parts, and the disk prompt cache is on.

The real window and the real bundled model run on the CPU. A GPU is simulated through
the planner's Hardware (engine.sizing.load_machine.machine): llama.cpp's CPU build runs the layers the
plan "offloads" on the CPU, so everything here passes without a GPU.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, replace

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from engine.loading import load as loading
from engine.sizing import load_machine as plan_load
from engine.sizing import load_plan
from engine.loading.gpu_guard import GpuGuard, crash_text
from engine.sizing.load_spec import AUTO, LoadSpec
from engine.sizing.load_plan import carry_out, plan_spec

from app.window.main_window import MainWindow
from app.window.selftest import write_settings
from app.core.settings import Settings, SettingsError, SettingsFile
from engine.errors import HearthError, ModelLoadError
from engine.sizing.hardware import simulated
from engine.sizing.plan import plan_for

OOM = "not enough memory to create a 8192-token context for the model (CUDA0: failed to allocate buffer)"


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def gpu(monkeypatch):
    """gpu("1GiB") -> that simulated machine, which every plan in the app now sees."""
    def use(size: str):
        hw = simulated(size, "8GiB", cores=2)
        monkeypatch.setattr(plan_load, "machine", lambda fmt, **_kw: hw)
        return hw
    return use


@pytest.fixture
def make_window(qtbot, data_dir):
    made: list[MainWindow] = []

    def make(settings: Settings | None = None, start: bool = True) -> MainWindow:
        if settings is None:
            write_settings(max_tokens=8)
        else:
            settings.sampling.update(temperature=0.0, seed=0, max_tokens=8)
            SettingsFile().save(settings)
        w = MainWindow()
        made.append(w)
        w.show()
        if start:
            w.start()
            qtbot.waitUntil(lambda: not w.host.loading, timeout=60_000)
            assert w.host.ready, w.info.messages()
        return w

    yield make
    for w in made:
        w.close()


def fail_first_load(monkeypatch, message: str = OOM) -> list[dict]:
    """Engine.open runs out of memory the first time (a device that was shorter than it
    said), then loads for real; returns the fields of every call's EngineConfig."""
    from engine import Engine

    real = Engine.open
    calls: list[dict] = []

    def load(cls, config, **kwargs):
        calls.append(asdict(config))
        if len(calls) == 1:
            raise ModelLoadError(message)
        return real(config, **kwargs)

    monkeypatch.setattr(Engine, "open", classmethod(load))
    return calls


def fail_first_reply(monkeypatch, error: Exception) -> None:
    """Engine.stream raises ``error`` the first time (the reply fails before any text), then streams."""
    from engine import Engine

    real = Engine.stream
    failed: list[int] = []

    def stream(self, *args, **kwargs):
        if not failed:
            failed.append(1)
            raise error
        yield from real(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "stream", stream)


def log_lines(data_dir) -> list[dict]:
    path = data_dir / loading.PLAN_LOG
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- settings and the plan's arguments (no window) ---------------------------------------

def test_gpu_layers_and_kv_type_are_settings_with_clear_errors(tmp_path):
    f = SettingsFile(tmp_path / "settings.json")
    s = Settings(gpu_layers=12, kv_type="q8_0")
    f.save(s)
    again, notice = SettingsFile(tmp_path / "settings.json").load()
    assert notice is None and (again.gpu_layers, again.kv_type) == (12, "q8_0")
    assert Settings(gpu_layers="all").validate().load_spec().gpu_layers == "all"
    assert Settings().load_spec().gpu_layers is AUTO and Settings().load_spec().kv_type == "auto"
    for bad, field in (({"gpu_layers": -1}, "gpu_layers"), ({"gpu_layers": "most"}, "gpu_layers"),
                       ({"gpu_layers": True}, "gpu_layers"), ({"kv_type": "q5_1"}, "kv_type")):
        with pytest.raises(SettingsError, match=f"^{field}"):
            Settings.from_dict({**Settings().to_dict(), **bad})
    with pytest.raises(SettingsError, match="^kv_type: .*GGUF"):
        Settings(model=str(tmp_path), source="hf_dir", kv_type="q8_0").validate()
    # a rollback target saved before these settings existed means Auto for both
    back = Settings().with_load(LoadSpec.from_dict({"model": "bundled", "context": 1024}))
    assert (back.gpu_layers, back.kv_type, back.context) == (AUTO, AUTO, 1024)


def test_auto_takes_the_plan_and_fixed_choices_stay_as_chosen(data_dir):
    hw = simulated("600MiB", "8GiB", cores=2)
    auto = Settings().load_spec()
    plan = plan_spec(auto, hw)
    # the plan shrank the KV, then offloaded: the output head (llama.cpp offloads it first, with its
    # ~100 MiB logits buffer) and 3 blocks
    assert plan.n_gpu_layers == 4 and plan.kv_type == "q8_0" and plan.gpu_layers_text == "3/30 + head"
    ref = auto.model_ref()
    kw = carry_out(plan, auto, ref, "llama_cpp", n_threads=1, data_dir=data_dir)
    assert (kw.n_ctx, kw.n_gpu_layers, kw.kv_type, kw.cache_budget) == \
        (plan.n_ctx, 4, "q8_0", plan.prefix_cache)
    assert kw.disk_cache == data_dir / load_plan.PREFIX_STORE and kw.disk_cache_bytes > 0
    assert kw.draft == "auto" and kw.backend == "llama_cpp"

    fixed = replace(auto, context=4096, gpu_layers=10, kv_type="f16", draft="none")
    plan = plan_spec(fixed, hw)
    kw = carry_out(plan, fixed, ref, "llama_cpp", n_threads=1, data_dir=data_dir)
    assert (kw.n_ctx, kw.n_gpu_layers, kw.kv_type, kw.draft) == (4096, 10, "f16", "none")
    everything = plan_spec(replace(auto, gpu_layers="all"), hw)
    assert everything.config.all_on_gpu  # "all" is every block and the output head
    # with no plan (a GGUF file on transformers), the settings go through as chosen
    assert replace(auto, backend="hf").plan_format is None
    kw = carry_out(None, replace(auto, gpu_layers="all", context=2048), ref, "llama_cpp", n_threads=1,
                   data_dir=data_dir)
    assert (kw.n_gpu_layers, kw.kv_type, kw.n_ctx) == (-1, "f16", 2048)


def test_a_plan_that_does_not_fit_says_why_and_keeps_the_choices():
    from app.core.plan_text import headline, refusal

    hw = simulated("450MiB", "8GiB", cores=2)
    req = replace(Settings().load_spec(), gpu_layers="all", kv_type="f16")
    plan = plan_spec(req, hw)
    assert not plan.fits and plan.config.all_on_gpu and plan.kv_type == "f16"
    why = refusal(plan)
    assert why.startswith("It does not fit: GPU memory is short by ")
    assert "Your choices are kept as they are (GPU layers 30/30 + head, KV cache f16)" in why
    assert "What would fit: with GPU layers on Auto" in why
    assert headline(plan).endswith("<br>" + refusal(plan, html=True)) and why in refusal(plan, html=True)


# -- the window -------------------------------------------------------------------------

def test_the_planner_answers_only_the_newest_request_and_a_bug_is_a_message(qtbot, monkeypatch):
    import threading

    from PySide6.QtCore import QObject

    from app.bridge.plan_runner import PlanRunner

    release = threading.Event()

    def plan(req, hardware):
        if req.model == "old.gguf":
            release.wait(30)
            return "old plan"
        if req.model == "bug.gguf":
            raise KeyError("n_layer")
        return "new plan"

    monkeypatch.setattr(plan_load, "machine", lambda fmt, **_kw: simulated("1GiB", "8GiB", cores=2))
    monkeypatch.setattr(load_plan, "plan_spec", plan)
    owner = QObject()
    runner = PlanRunner(owner)
    ready, failed = [], []
    runner.ready.connect(lambda n, p: ready.append((n, p)))
    runner.failed.connect(lambda n, m: failed.append((n, m)))
    old = runner.request(LoadSpec(model="old.gguf", source="gguf"))
    new = runner.request(LoadSpec(model="new.gguf", source="gguf"))
    qtbot.waitUntil(lambda: ready == [(new, "new plan")], timeout=10_000)
    release.set()
    bug = runner.request(LoadSpec(model="bug.gguf", source="gguf"))
    qtbot.waitUntil(lambda: bool(failed) and runner._bg.running() == 0, timeout=10_000)  # every answer is back
    assert old < new < bug and ready == [(new, "new plan")]  # the old answer came after the new one: dropped
    assert failed == [(bug, "the memory planner failed (KeyError: 'n_layer')")]


def test_the_window_loads_the_plan_and_the_dialog_shows_what_auto_runs_with(qtbot, make_window, gpu, data_dir):
    from app.settings_ui.settings_dialog import SettingsDialog

    hw = gpu("600MiB")
    plan = plan_for(None, hw)
    w = make_window()
    m = w.host.model
    assert (m.n_ctx, m.local.n_gpu_layers, m.local.kv_type) == (plan.n_ctx, plan.n_gpu_layers, plan.kv_type)
    assert m.local.plan["summary"] == plan.summary() and m.local.prefix_budget == plan.prefix_cache
    assert "GPU layers: 4, KV cache: q8_0" in w.model_label.toolTip()
    assert (w.settings.gpu_layers, w.settings.kv_type, w.settings.context) == (AUTO, AUTO, AUTO)  # still Auto

    dlg = SettingsDialog(w.settings, w)
    qtbot.addWidget(dlg)
    qtbot.waitUntil(lambda: dlg.plan is not None, timeout=30_000)
    assert dlg.plan.summary() == plan.summary()  # the dialog plans what the load carried out
    assert dlg.ctx_auto.isChecked() and dlg.ctx.value() == plan.n_ctx and not dlg.ctx.isEnabled()
    assert dlg.gpu_mode.currentData() == "auto" and dlg.gpu_layers.value() == 4
    assert dlg.kv_combo.currentData() == "auto" and dlg.kv_combo.currentText() == "Auto (q8_0)"
    assert "what the status bar shows once loaded" in dlg.memory.text()
    dlg.gpu_mode.setCurrentIndex(dlg.gpu_mode.findData("number"))
    dlg.gpu_layers.setValue(5)
    dlg.kv_combo.setCurrentIndex(dlg.kv_combo.findData("q4_0"))
    qtbot.waitUntil(lambda: dlg.plan is not None and dlg.plan.n_gpu_layers == 5, timeout=30_000)
    assert dlg.plan.kv_type == "q4_0"
    built = dlg.build()
    assert (built.gpu_layers, built.kv_type) == (5, "q4_0")
    w.apply_settings(built)
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
    assert (w.host.model.local.n_gpu_layers, w.host.model.local.kv_type) == (5, "q4_0")


def test_memory_figure_counts_what_the_plan_counts_and_each_load_is_recorded(qtbot, make_window, data_dir):
    w = make_window()
    m = w.host.model
    plan = m.local.plan
    measured = plan["actual"]
    assert m.local.memory_total == measured["weights"] + measured["kv"] + measured["compute"] == measured["total"]
    assert w.memory_label.text().startswith("Memory ")
    tip = w.memory_label.toolTip()
    assert "Weights + KV cache + compute buffers" in tip and "predicted" in tip and "Not in this figure" in tip
    assert abs(plan["rel_error"]["total"]) < 0.10  # the CPU is the case the memory model was fitted on
    (entry,) = log_lines(data_dir)
    assert entry["model"] and entry["rel_error"] == plan["rel_error"] and entry["retried"] is False
    assert entry["predicted"]["total"] == plan["predicted"]["total"] and entry["runtime"] == "cpu"

    QTest.mouseClick(w.memory_label, Qt.MouseButton.LeftButton)
    dlg = w.memory_details
    assert dlg is not None and dlg.isVisible()
    rows = {dlg.table.item(r, 0).text(): [dlg.table.item(r, c).text() for c in range(1, 4)]
            for r in range(dlg.table.rowCount())}
    assert {"weights", "KV cache", "compute buffers", "total (the status bar's figure)",
            "prefix cache in RAM", "prefix cache on disk"} <= set(rows)
    assert rows["total (the status bar's figure)"][1] == w.memory_label.text().removeprefix("Memory ")
    assert rows["KV cache"][2].endswith("%")

    w.apply_settings(Settings(**{**w.settings.to_dict(), "context": 1024}))
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
    assert [e["n_ctx"] for e in log_lines(data_dir)] == [m.n_ctx, 1024]  # one record per load


def test_a_load_that_runs_out_of_memory_retries_with_a_smaller_plan(qtbot, make_window, gpu, monkeypatch,
                                                                   data_dir):
    hw = gpu("1GiB")
    first = plan_for(None, hw)
    assert first.config.all_on_gpu and first.kv_type == "f16"
    calls = fail_first_load(monkeypatch)
    w = make_window(start=False)
    w.chat.input.setPlainText("typed while the model loads")
    w.start()
    qtbot.waitUntil(lambda: not w.host.loading, timeout=60_000)
    assert w.host.ready, w.info.messages()
    assert len(calls) == 2 and calls[0]["n_gpu_layers"] == 31 and calls[1]["kv_type"] == "q8_0"
    m = w.host.model
    assert (m.local.n_gpu_layers, m.local.kv_type) == (25, "q8_0")
    msgs = " ".join(w.info.messages())
    assert "Out of memory with the first plan; loaded with GPU layers 30/30 + head -> 24/30 + head, " \
           "KV cache f16 -> q8_0 instead." in msgs
    assert w.chat.input_text() == "typed while the model loads"
    saved, _ = SettingsFile().load()
    assert (saved.gpu_layers, saved.kv_type) == (AUTO, AUTO)  # Auto stays Auto; nothing was fixed
    assert log_lines(data_dir)[-1]["retried"] is True


def test_a_fixed_choice_that_runs_out_of_memory_is_not_overridden(qtbot, make_window, gpu, monkeypatch):
    gpu("1GiB")
    fixed = Settings(gpu_layers="all", kv_type="f16", context=8192)
    SettingsFile().mark_working(Settings())
    calls = fail_first_load(monkeypatch)
    w = make_window(fixed, start=False)
    w.start()
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)  # failed, then back on the set-up that worked
    msgs = " ".join(w.info.messages())
    assert "with the settings you fixed (context, gpu_layers, kv) there is no smaller plan" in msgs
    assert "Went back to the bundled model" in msgs
    assert calls[0]["n_gpu_layers"] == 31 and calls[0]["kv_type"] == "f16" and calls[0]["n_ctx"] == 8192


def test_the_dialog_refuses_a_set_up_that_does_not_fit_unless_confirmed(qtbot, make_window, gpu):
    from app.settings_ui.settings_dialog import SettingsDialog

    gpu("450MiB")
    w = make_window(start=False)
    dlg = SettingsDialog(w.settings, w)
    qtbot.addWidget(dlg)
    dlg.gpu_mode.setCurrentIndex(dlg.gpu_mode.findData("all"))
    dlg.kv_combo.setCurrentIndex(dlg.kv_combo.findData("f16"))
    qtbot.waitUntil(lambda: dlg.plan is not None and dlg.plan.config.all_on_gpu, timeout=30_000)
    assert not dlg.plan.fits
    assert "does not fit" in dlg.memory.text() and "GPU memory is short by" in dlg.memory.text()
    asked: list[str] = []
    dlg.confirm_too_big = lambda why: asked.append(why) or False
    dlg.accept()
    assert dlg.result_settings is None and asked and "Your choices are kept as they are" in asked[0]
    dlg.confirm_too_big = lambda why: True
    dlg.accept()
    assert (dlg.result_settings.gpu_layers, dlg.result_settings.kv_type) == ("all", "f16")
    w.apply_settings(dlg.result_settings)
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
    assert w.host.model.local.n_gpu_layers == 31 and w.host.model.local.kv_type == "f16"  # as chosen
    assert any("it loads with your choices as they are" in m for m in w.info.messages())


def test_a_reply_that_runs_out_of_memory_reloads_a_smaller_plan_and_keeps_the_text(qtbot, make_window, gpu,
                                                                                   monkeypatch):

    gpu("1GiB")
    w = make_window()
    assert w.host.model.local.kv_type == "f16"
    fail_first_reply(monkeypatch, HearthError("not enough memory for the compute buffer (CUDA0: failed to allocate)"))
    w.chat.input.setPlainText("Hello")
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    assert w.chat.input_text() == "Hello"  # the failed send gave the text back
    qtbot.waitUntil(lambda: w.host.ready and w.host.model.local.kv_type == "q8_0", timeout=60_000)
    msgs = " ".join(w.info.messages())
    assert "The reply ran out of memory" in msgs and "reloaded with" in msgs and "KV cache f16 -> q8_0" in msgs
    assert w.settings.kv_type == "auto"
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)  # now the reply comes
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    assert [m.role for m in w.store.messages(w.current)] == ["user", "assistant"]


def test_the_disk_prompt_cache_is_on_and_clear_cache_frees_it(qtbot, make_window, data_dir):
    from app.core.text_utils import human_bytes

    w = make_window()
    bar = w.chat.system
    bar.toggle.setChecked(True)
    bar.editor.setPlainText("You are a careful assistant who answers in one short sentence. " * 8)
    bar.flush()
    w.chat.input.setPlainText("Hi")
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    store = data_dir / load_plan.PREFIX_STORE
    saved = sum(p.stat().st_size for p in store.glob("*.kv"))
    assert saved > 0  # the system prompt's KV went to disk, for the next start
    w.show_memory_details()
    dlg = w.memory_details
    row = next(r for r in range(dlg.table.rowCount()) if dlg.table.item(r, 0).text() == "prefix cache on disk")
    assert dlg.table.item(row, 2).text() == human_bytes(saved)
    dlg.clear_button.click()
    assert dlg.cleared.text() == f"Freed {human_bytes(saved)} of saved prompt snapshots."
    assert dlg.table.item(row, 2).text() == "0 B" and not list(store.glob("*.kv"))


def test_settings_shows_the_disk_prompt_cache_and_clears_it(qtbot, make_window, data_dir):
    from app.settings_ui.settings_dialog import SettingsDialog
    from app.core.text_utils import human_bytes

    store = data_dir / load_plan.PREFIX_STORE
    store.mkdir()
    (store / "a.kv").write_bytes(b"x" * 3000)
    (store / "b.kv").write_bytes(b"x" * 2000)
    w = make_window(start=False)
    dlg = SettingsDialog(w.settings, w)
    qtbot.addWidget(dlg)
    assert dlg.cache_label.text().startswith(f"2 saved system-prompt snapshots: {human_bytes(5000)} on disk")
    dlg.clear_cache_button.click()
    assert dlg.cache_label.text().startswith(f"Freed {human_bytes(5000)}. 0 saved system-prompt snapshots: 0 B")
    assert not list(store.glob("*.kv"))


# -- a GPU that stops the process, or fails under a reply ------------------------------------

def test_a_start_after_stopping_with_the_model_on_a_gpu_runs_on_the_cpu_once_and_says_why(qtbot, make_window, gpu,
                                                                                        monkeypatch, data_dir):
    from engine import Engine

    guard = GpuGuard(data_dir)
    hw = gpu("8GiB")
    assert plan_for(None, hw).n_gpu_layers > 0  # Auto would put the model on the GPU
    # What a run leaves when llama.cpp's CUDA backend aborts the process (a driver reset, a GPU gone).
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    guard.path.write_text(json.dumps({
        "phase": "running", "model": "SmolLM2-135M-Instruct.Q4_1.gguf", "device": "CUDA0", "runtime": "cuda",
        "pid": int(dead.stdout), "started": 1.0}))
    real = Engine.open
    calls: list[dict] = []
    monkeypatch.setattr(Engine, "open", classmethod(lambda cls, config, **kw: calls.append(asdict(config))
                                                    or real(config, **kw)))
    w = make_window()
    assert calls[0]["n_gpu_layers"] == 0 and w.host.model.local.n_gpu_layers == 0
    bars = [b for b in w.info.bars() if "stopped unexpectedly" in b.text()]
    assert len(bars) == 1 and "was running on CUDA0" in bars[0].text() and "your chats are all here" in bars[0].text()
    assert not guard.path.exists()  # taken: the start after this one is a normal one
    assert w.settings.gpu_layers is AUTO and SettingsFile().load()[0].gpu_layers is AUTO  # Auto stays Auto
    assert SettingsFile().load()[0].load_spec() == w.settings.load_spec()
    # A reply that runs out of memory now reloads a smaller plan, still on the CPU.
    fail_first_reply(monkeypatch, HearthError("not enough memory to compute a batch of 8 tokens "
                                              "(llama_decode returned -2)"))
    w.chat.input.setPlainText("Hello")
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(calls) == 2 and w.host.ready, timeout=60_000)
    assert calls[1]["n_gpu_layers"] == 0 and w.chat.input_text() == "Hello"
    bars[0].action_button.click()  # "Use the GPU again"
    qtbot.waitUntil(lambda: len(calls) == 3 and w.host.ready, timeout=60_000)
    assert calls[2]["n_gpu_layers"] == plan_for(None, hw).n_gpu_layers
    # The CPU build put nothing on a device, so no marker is left for the next start.
    assert not guard.path.exists()


def test_a_marker_is_taken_only_from_a_run_that_ended(data_dir):
    gpu_guard = GpuGuard(data_dir)
    assert gpu_guard.take() is None
    gpu_guard.mark("loading", model="big.gguf")
    assert gpu_guard.take() is None and gpu_guard.path.exists()  # this process is running: not a crash
    # Another Hearth on the same data folder, still running: its marker is not ours to take or clear.
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        import psutil

        entry = {**json.loads(gpu_guard.path.read_text()), "pid": other.pid,
                 "started": psutil.Process(other.pid).create_time()}
        gpu_guard.path.write_text(json.dumps(entry))
        assert gpu_guard.take() is None
        gpu_guard.clear()
        assert gpu_guard.path.exists()
    finally:
        other.communicate(b"")
    taken = gpu_guard.take()  # its process has ended: now it is a run that stopped with the model loading
    assert taken["phase"] == "loading" and taken["model"] == "big.gguf" and gpu_guard.take() is None
    assert "while big.gguf was loading on the GPU" in crash_text(taken)
    gpu_guard.path.write_text("{not json")  # cut off by the stop itself
    assert gpu_guard.take() == {"phase": "running"} and not gpu_guard.path.exists()
    gpu_guard.mark("running", device="Vulkan0")
    gpu_guard.clear()  # ours: cleared
    assert not gpu_guard.path.exists()


def test_a_device_that_fails_under_a_reply_moves_the_model_to_the_cpu_and_keeps_the_text(qtbot, make_window, gpu,
                                                                                      monkeypatch):
    from engine.backends.llama.log import decode_error

    hw = gpu("8GiB")
    w = make_window()
    assert w.host.model.local.n_gpu_layers == plan_for(None, hw).n_gpu_layers > 0
    # Where the layers went comes from llama.cpp's log; this CPU build has no device to fail, so the
    # window is told the model runs on one, and the engine fails as ggml-vulkan does on a lost device.
    w.host.model = replace(w.host.model, runtime="vulkan", device="Vulkan0")
    fail_first_reply(monkeypatch, decode_error(-3, 12))
    w.chat.input.setPlainText("Hello")
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    assert w.chat.input_text() == "Hello"  # the failed send gave the text back
    qtbot.waitUntil(lambda: w.host.ready and w.host.model.local.n_gpu_layers == 0, timeout=60_000)
    assert "Vulkan0 failed during the reply" in " ".join(w.info.messages())
    assert w.settings.gpu_layers is AUTO  # Auto stays Auto
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)  # now the reply comes, from the CPU
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    assert [m.role for m in w.store.messages(w.current)] == ["user", "assistant"]

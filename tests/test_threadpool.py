"""engine/backends/llama/threadpool.py: our ctypes bindings of llama.cpp's CPU thread pool,
attached to the real bundled model, and the ``threads_poll`` load option end to end."""
from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from engine import HearthError
from engine.backends.llama import threadpool as tp
from engine.backends.llama.backend import LlamaCppBackend
from engine.engine import Engine
from engine.config import EngineConfig
from engine.loading.load import load_model
from engine.sizing.load_spec import AUTO, LoadSpec
from engine.sizing.load_plan import carry_out
from engine.prompt.messages import Message
from engine.types import SamplingParams
from app.core.settings import Settings, SettingsFile

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
CHAT = [Message("user", "Tell me about lighthouses.")]


def _tokens(engine) -> list[int]:
    return [ev for ev in engine.stream(CHAT, GREEDY) if ev.kind == "final"][0].token_ids


def test_struct_layout_is_ggmls():
    """ThreadpoolParams as ggml.h declares it, checked against ggml's own init at first use."""
    P = tp.ThreadpoolParams
    assert tp.GGML_MAX_N_THREADS == 512 and ctypes.sizeof(P) == 528
    assert [(n, getattr(P, n).offset) for n, _ in P._fields_] == [
        ("cpumask", 0), ("n_threads", 512), ("prio", 516), ("poll", 520), ("strict_cpu", 524), ("paused", 525)]
    a = tp.api()  # runs check_layout on the real ggml_threadpool_params_init
    mine = P()
    a.params_init(ctypes.byref(mine), 3)
    theirs = a.params_default(3)  # returned by value: only called once the layout is known
    assert (theirs.n_threads, theirs.poll, theirs.prio, theirs.paused) == (3, tp.POLL_DEFAULT, 0, False)
    assert a.params_match(ctypes.byref(mine), ctypes.byref(theirs))
    mine.poll = 0
    assert not a.params_match(ctypes.byref(mine), ctypes.byref(theirs))


def test_layout_check_catches_another_struct():
    """A ggml with GGML_MAX_N_THREADS 1024 (its fields 512 bytes later) fails the check."""
    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)
    def bigger(p, n):
        ctypes.memset(p, 0, 1024)
        ctypes.c_int.from_address(p + 1024).value = n
        ctypes.c_uint32.from_address(p + 1032).value = 50

    with pytest.raises(HearthError, match="does not match"):
        tp.check_layout(bigger)


def test_symbols_are_the_ones_llama_cpp_runs():
    """new/free come from the libggml-cpu llama.cpp loaded (the CPU backend's own proc address)."""
    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                    ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    info = DlInfo()
    assert libc.dladdr(tp.api().new_at, ctypes.byref(info))
    where = Path(info.fname.decode())
    assert info.sname == b"ggml_threadpool_new" and where.name.startswith("libggml-cpu")
    import llama_cpp

    assert where.resolve().parent == (Path(llama_cpp.__file__).parent / "lib").resolve()
    mapped = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
              if "libggml-cpu" in line}
    assert mapped == {str(where.resolve())}  # the one copy llama.cpp mapped, not a second beside it
    assert tp.openmp() == ("OPENMP" in tp.cpu_features())


def test_pool_poll_zero_gives_the_same_greedy_tokens(engine, bundled_path):
    """The same model with every graph on our pool (poll 0) decodes token for token the same."""
    reference = _tokens(engine)  # the conftest engine: 2 threads, llama.cpp's own
    pooled = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, threads_poll=0, cache_budget=0))
    pool = pooled.backend._pool
    try:
        assert pool is not None and pool.attached == 1 and not pool.freed
        assert (pool.n_threads, pool.poll) == (2, 0) and pooled.backend.threads_poll == 0
        assert _tokens(pooled) == reference
        pool.pause()
        pool.resume()  # a paused pool's workers wake for the next graph
        pooled.reset()
        assert _tokens(pooled) == reference
    finally:
        pooled.close()
    assert pool.freed and pool.attached == 0
    pooled.close()  # twice is harmless


def test_pool_is_never_freed_under_a_context(bundled_path):
    b = LlamaCppBackend(bundled_path, n_ctx=256, n_threads=2)
    try:
        with pytest.raises(HearthError, match="the pool has 1"):
            with tp.ThreadPool(1, 0) as small:  # an OpenMP build would index past its workers
                small.attach(b._ctx)
        assert small.freed
        pool = tp.ThreadPool(2, 10)
        pool.attach(b._ctx)
        with pytest.raises(HearthError, match="detach it first"):
            pool.free()
        assert not pool.freed
        b.forward(b.tokenize("Hello", add_bos=True))
        pool.detach(b._ctx)
    finally:
        b.close()  # the context goes first: ggml's CPU backend held the pool until now
    pool.free()
    assert pool.freed
    with pytest.raises(HearthError, match="freed"):
        pool.pause()


def test_a_draft_runs_on_a_pool_of_its_own(bundled_path):
    target = LlamaCppBackend(bundled_path, n_ctx=256, n_threads=1, threads_poll=5)
    draft = target.open_draft(bundled_path, n_threads=1)
    try:
        assert draft.threads_poll == 5 and draft._pool is not None and draft._pool is not target._pool
        assert draft._pool.attached == 1
    finally:
        pools = draft._pool, target._pool
        draft.close()
        target.close()
    assert all(p is not None and p.freed for p in pools)


@pytest.mark.parametrize("poll", [-1, 101, 1.5, "0", True])
def test_bad_poll_values_get_a_clear_error(bundled_path, poll):
    with pytest.raises(HearthError, match=r"threads_poll: must be a whole number from 0 .* to 100"):
        tp.ThreadPool(2, poll)
    with pytest.raises(HearthError, match="threads_poll"):
        LlamaCppBackend(bundled_path, n_ctx=256, threads_poll=poll)
    with pytest.raises(HearthError, match="threads"):
        tp.ThreadPool(0, 0)


def test_thread_options_and_the_windows_rule():
    from app.bridge.load_runner import APP_THREADS, app_threads

    assert tp.thread_option("cores-1", cores=4) == (3, None)
    assert tp.thread_option("cores-1", cores=1) == (1, None)
    assert tp.thread_option("all", cores=4) == (4, None)
    assert tp.thread_option("all-poll0", cores=4) == (4, 0)
    assert set(tp.THREAD_OPTIONS) == {"cores-1", "all", "all-poll0"}
    with pytest.raises(HearthError, match="unknown thread option"):
        tp.thread_option("most")
    assert APP_THREADS in tp.THREAD_OPTIONS and app_threads() == tp.thread_option(APP_THREADS)


def test_load_request_carries_the_poll_level(bundled_path):
    req = LoadSpec(threads_poll=0, n_threads=1)
    assert LoadSpec.from_dict(json.loads(json.dumps(req.as_dict()))) == req
    old = {k: v for k, v in req.as_dict().items() if k != "threads_poll"}  # a file from before the field
    assert LoadSpec.from_dict(old).threads_poll is AUTO
    assert carry_out(None, req, req.model_ref(), "llama_cpp", n_threads=1, threads_poll=0).threads_poll == 0
    # the request's own level wins over the caller's Auto; without one, the caller's applies
    loaded = load_model(req, data_dir=None, threads_poll=7)
    try:
        assert loaded.engine.backend.threads_poll == 0 and loaded.model.local.threads_poll == 0
    finally:
        loaded.engine.close()
    loaded = load_model(LoadSpec(n_threads=1), data_dir=None, threads_poll=7)
    try:
        assert loaded.engine.backend.threads_poll == 7 and loaded.engine.backend._pool.poll == 7
    finally:
        loaded.engine.close()


def test_settings_round_trip_and_a_bad_value(tmp_path):
    f = SettingsFile(tmp_path / "settings.json")
    s = Settings(threads_poll=0, n_threads=2)
    f.save(s)
    again, notice = SettingsFile(tmp_path / "settings.json").load()
    assert notice is None and again == s and again.load_spec().threads_poll == 0
    assert Settings().with_load(again.load_spec()).threads_poll == 0
    for bad in (150, -1, "low", True):
        path = tmp_path / f"bad-{bad}.json"
        path.write_text(json.dumps({**s.to_dict(), "threads_poll": bad}))
        loaded, notice = SettingsFile(path).load()
        assert loaded.threads_poll is AUTO and loaded.n_threads == 2  # the others are kept
        assert notice is not None and "threads_poll: must be Auto or a whole number from 0" in notice


def test_the_threads_benchmark_summary():
    from engine.bench import NAMES, threads
    from engine.cli import build_parser

    assert "threads" in NAMES
    a = build_parser().parse_args(["bench", "threads", "--tokens", "8", "--rounds", "3"])
    assert (a.which, a.tokens, a.rounds) == ("threads", 8, 3)
    out = threads.summarise({"cores-1": [10.0, 30.0, 20.0], "all": [15.0, 40.0, 45.0], "all-poll0": []},
                            {"cores-1": [1.0, 3.0, 2.0], "all": [9.0, 5.0, 7.0]},
                            {"cores-1": [1.0, 0.5, 0.9], "all": [0.25, 0.5]})
    assert out["cores-1"]["median_tok_s"] == 20.0 and out["cores-1"]["ratio_vs_cores-1"] == 1.0
    assert out["all"]["ratio_vs_cores-1"] == 2.0 and out["all"]["render_late_p95_ms"] == 7.0
    assert (out["cores-1"]["render_frame_ratio"], out["all"]["render_frame_ratio"]) == (0.9, 0.375)
    assert "all-poll0" not in out  # an option with no rounds is left out, not given a made-up figure
    assert threads.p95([float(i) for i in range(1, 101)]) == 96.0 and threads.p95([]) == 0.0
    load = threads.RenderLoad(period_s=0.02)
    load.late_s, load.elapsed_s = [0.0] * 25, 1.0  # 25 of the 50 frames due in a second
    assert load.frame_ratio == 0.5


def test_the_settings_dialog_keeps_the_poll_level(qtbot, tmp_path, monkeypatch):
    """The dialog offers no control for it (yet): editing other settings keeps the file's value."""
    from app.settings_ui.settings_dialog import SettingsDialog

    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    dlg = SettingsDialog(Settings(threads_poll=0, n_threads=2, context_policy="stop"))
    qtbot.addWidget(dlg)
    form = dlg.sampling_form
    form.policy.setCurrentIndex(form.policy.findData("drop_oldest"))
    built = dlg.build()
    assert (built.threads_poll, built.n_threads, built.context_policy) == (0, 2, "drop_oldest")


def test_the_windows_auto_threads_are_every_physical_core():
    # Chosen by measurement (docs/benchmarks.md, "Threads"): every core, on the one engine thread.
    from app.bridge.load_runner import app_threads

    assert app_threads() == tp.ThreadChoice(tp.default_threads(), None)

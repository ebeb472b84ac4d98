"""llama.cpp RPC workers on 127.0.0.1 standing in for other machines' devices."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from engine import HearthError
from engine.backends.llama.rpc import probe_worker
from rpc_workers import ROOT, free_port, kill_mid_reply, start_worker

@pytest.fixture
def worker(tmp_path):
    endpoint, p = start_worker(tmp_path)
    yield endpoint, p
    p.kill()
    p.wait(10)


@pytest.fixture
def two_workers(tmp_path):
    started = [start_worker(tmp_path, f"worker{i}") for i in range(2)]
    yield [e for e, _ in started]
    for _, p in started:
        p.kill()
        p.wait(10)


def test_a_worker_answers_hello_with_this_builds_protocol_and_says_its_memory(worker):
    from engine.backends.llama.rpc import worker_memory

    v = probe_worker(worker[0])
    assert (v.major, v.minor) == (7, 0)
    (free, total), = worker_memory(worker[0])  # one device: this machine's CPU, its RAM
    assert 0 < free <= total


def test_a_port_that_is_not_a_worker_is_an_error_not_an_abort():
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    with pytest.raises(HearthError, match="did not answer|closed the connection|not as a llama.cpp RPC worker"):
        probe_worker(f"127.0.0.1:{port}", timeout=0.5)
    srv.close()
    with pytest.raises(HearthError, match="no worker at"):
        probe_worker(f"127.0.0.1:{port}")


def test_a_model_split_over_two_workers_answers_as_the_local_one_and_as_planned(two_workers, bundled_path):
    """In a child process (registration is process-wide, and a failed RPC call aborts): the bundled model's
    planned load with every layer split over two workers, greedy, exact profile, against the same model all
    local; and the plan, per device, against the buffers llama.cpp allocated there."""
    code = f'''
from engine.backends.llama.rpc import add_worker
from engine.config import EngineConfig
from engine.engine import Engine
from engine.loading.load import load_model
from engine.sizing.load_spec import AUTO, LoadSpec
from engine.sizing.reality import device_errors
from engine import Message, SamplingParams
p = SamplingParams(temperature=0.0, max_tokens=16)
m = [Message("user", "Name three colours.")]
local = Engine.open(EngineConfig({str(bundled_path)!r}, n_ctx=2048, n_threads=1, exactness="exact"))
a = list(local.stream(m, p))[-1].text
local.close()
names = [add_worker(w) for w in {two_workers!r}]
r = load_model(LoadSpec(model={str(bundled_path)!r}, context=2048, gpu_layers="all", exactness="exact"),
               data_dir=None, n_threads=1)
b = list(r.engine.stream(m, p))[-1].text
memory = r.engine.describe().local.memory
draft = r.engine.backend.open_draft({str(bundled_path)!r}).n_gpu_layers  # a draft never goes over the link
print(repr((names, a, b, r.plan.tensor_split, device_errors(r.plan, memory), r.check["rel_error"], memory, draft)))
'''
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    names, a, b, split, per_device, overall, memory, draft = eval(out.stdout.strip().splitlines()[-1])
    assert names == [["RPC0"], ["RPC1"]] and a and b == a
    assert draft == 0  # only workers take layers here: the draft stays on this machine's CPU
    assert split is not None and len(split) == 2 and all(split)  # both workers hold layers
    for w in two_workers:
        assert memory.get(f"weights@RPC0[{w}]", 0) > 30e6  # the weights really are on each worker
        errors = per_device[f"worker {w}"]
        assert set(errors) == {"weights", "kv", "compute"}
        assert all(abs(e) <= 0.10 for e in errors.values()), per_device
    assert abs(overall["compute"]) <= 0.10  # this machine's side of the split too


def test_a_worker_binds_loopback_unless_told_and_then_warns(tmp_path):
    from engine.cli.worker import run_worker

    with pytest.raises(HearthError, match="binds 127.0.0.1 unless --unsafe-listen"):
        run_worker("0.0.0.0", free_port())


def test_the_devices_llama_cpp_loads_on_include_a_registered_worker(worker, tmp_path):
    """list_devices reads libllama's ggml (a wheel ships libggml.so as a second copy with its own registry)."""
    code = f'''
from engine.backends.llama.rpc import add_worker
from engine.backends.llama.devices import list_devices
add_worker({worker[0]!r})
print(repr([(d.name, d.type, d.description) for d in list_devices()]))
'''
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ("RPC0", "gpu", worker[0]) in eval(out.stdout.strip().splitlines()[-1])


def test_a_worker_killed_mid_reply_never_takes_the_client_with_it(worker, tmp_path):
    """The model on the worker runs in a child ``engine serve --rpc``; the client (the window's remote engine)
    sees the reply cut, keeps what came, and lives."""
    from engine.remote.connect import open_remote
    from engine.remote.errors import RemoteError
    from engine.remote.pins import MemoryPins
    from serving import hearth_process

    endpoint, proc = worker
    (tmp_path / "serve").mkdir()
    with hearth_process(tmp_path / "serve", "--rpc", endpoint) as (url, _port):
        eng = open_remote(url, pins=MemoryPins())
        got, error = kill_mid_reply(eng, proc, RemoteError)
        assert got and error.kind in ("lost", "http")


def test_placement_names_a_worker_as_a_worker_not_the_cpu():
    from engine.backends.llama.devices import placement

    log = ["load_tensors: offloaded 31/31 layers to GPU\n",
           "load_tensors: RPC0[127.0.0.1:50052] model buffer size =    33.82 MiB\n",
           "load_tensors: RPC0[127.0.0.1:50053] model buffer size =    58.28 MiB\n",
           "load_tensors:   CPU_Mapped model buffer size =    28.69 MiB\n"]
    p = placement(log)
    assert p.runtime == "rpc" and p.device == "RPC0[127.0.0.1:50052]+RPC0[127.0.0.1:50053]"


def test_bench_rpc_side_answers_prefill_and_decode_with_every_layer_on_a_worker(worker, bundled_path):
    """`bench rpc`'s side on a worker (the comparison with all local is the benchmark's)."""
    from engine.bench.speed import Side

    s = Side("one worker", bundled_path, 1, module="engine.bench.rpc", extra=("cpu", worker[0]))
    try:
        assert s.ask("pp 64") > 0 and s.ask("tg") > 0
    finally:
        s.close()
    assert s.proc.returncode == 0


def test_bench_rpc_pairs_each_side_with_local_and_reads_its_bar_against_the_interval():
    from engine.bench.rpc import rpc_ratios

    # Five rounds; the machine slows in round 3 for everyone. One worker decodes at 0.93x local in every
    # round but one; two workers at about half.
    local = {"pp512": [100.0, 100.0, 60.0, 100.0, 100.0], "tg128": [50.0, 50.0, 30.0, 50.0, 50.0]}
    one = {"pp512": [96.0, 97.0, 58.0, 95.0, 96.0], "tg128": [46.5, 46.5, 27.9, 46.5, 40.0]}
    two = {"pp512": [55.0, 56.0, 33.0, 55.0, 54.0], "tg128": [27.0, 27.5, 16.5, 27.0, 27.0]}
    out = rpc_ratios({"local": local, "one worker": one, "two workers": two})
    assert out["vs_local"]["one worker"] == {"pp512": 0.96, "tg128": 0.93}
    assert out["vs_local_range"]["one worker"]["tg128"] == [0.8, 0.93]
    assert out["vs_local_ci"]["two workers"]["pp512"] == [0.54, 0.56] and out["ci_coverage"] == 0.938
    assert out["meets"] == {"decode_one_worker_at_least_0.9": True}
    assert out["bar"] == {"decode_one_worker_at_least_0.9": "within noise"}  # the odd round reaches under 0.9
    assert out["tok_s"]["local"]["tg128"] == 50.0 and "local" not in out["vs_local"]

"""llama.cpp RPC workers on 127.0.0.1 standing in for other machines' devices."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import HearthError
from engine.backends.llama.rpc import probe_worker

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


@pytest.fixture
def worker(tmp_path):
    port = free_port()
    log = open(tmp_path / "worker.txt", "w")
    p = subprocess.Popen([sys.executable, "-m", "engine", "worker", "--port", str(port), "--threads", "1"],
                         cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                         env={**os.environ, "HEARTH_DATA_DIR": str(tmp_path)})
    deadline = time.monotonic() + 30
    while True:
        try:
            probe_worker(f"127.0.0.1:{port}")
            break
        except HearthError:
            if p.poll() is not None or time.monotonic() > deadline:
                pytest.fail((tmp_path / "worker.txt").read_text())
            time.sleep(0.2)
    yield f"127.0.0.1:{port}", p
    p.kill()
    p.wait(10)


def test_a_worker_answers_hello_with_this_builds_protocol(worker):
    v = probe_worker(worker[0])
    assert (v.major, v.minor) == (7, 0)


def test_a_port_that_is_not_a_worker_is_an_error_not_an_abort():
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    with pytest.raises(HearthError, match="did not answer|closed the connection|not as a llama.cpp RPC worker"):
        probe_worker(f"127.0.0.1:{port}", timeout=0.5)
    srv.close()
    with pytest.raises(HearthError, match="no worker at"):
        probe_worker(f"127.0.0.1:{port}")


def test_a_model_split_over_a_worker_answers_as_the_local_one(worker, bundled_path, tmp_path):
    """In a child process (registration is process-wide, and a failed RPC call aborts): the bundled model
    with every layer on the worker, greedy, exact profile, against the same model all local."""
    code = f'''
import sys
from engine.backends.llama.rpc import add_worker
from engine.config import EngineConfig
from engine.engine import Engine
from engine import Message, SamplingParams
p = SamplingParams(temperature=0.0, max_tokens=16)
m = [Message("user", "Name three colours.")]
local = Engine.open(EngineConfig({str(bundled_path)!r}, n_ctx=1024, n_threads=1))
a = list(local.stream(m, p))[-1].text
local.close()
names = add_worker({worker[0]!r})
remote = Engine.open(EngineConfig({str(bundled_path)!r}, n_ctx=1024, n_threads=1, n_gpu_layers=-1))
b = list(remote.stream(m, p))[-1].text
print(repr((names, a, b, remote.describe().memory)))
'''
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    names, a, b, memory = eval(out.stdout.strip().splitlines()[-1])
    assert names == ["RPC0"] and a and b == a
    assert memory.get(f"weights@RPC0[{worker[0]}]", 0) > 90e6  # the weights really are on the worker


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
    from engine import Message, SamplingParams
    from engine.remote.connect import open_remote
    from engine.remote.errors import RemoteError
    from engine.remote.pins import MemoryPins
    from serving import hearth_process

    endpoint, proc = worker
    (tmp_path / "serve").mkdir()
    with hearth_process(tmp_path / "serve", "--rpc", endpoint) as (url, _port):
        eng = open_remote(url, pins=MemoryPins())
        got: list[str] = []
        with pytest.raises(RemoteError) as e:
            for ev in eng.stream([Message("user", "Write a long story about a dragon.")],
                                 SamplingParams(temperature=0.0, max_tokens=400)):
                got.append(ev.text)
                if len(got) == 5:
                    proc.kill()  # kill -9 the worker mid-reply
        assert "".join(got) and e.value.kind in ("lost", "http")

"""Other machines for one model: a worker reached directly and one started over SSH (a real sshd on a
loopback port), the child process a model on them runs in, a worker lost mid-reply, and the allow-list
of a worker that listens beyond loopback."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from engine import HearthError, Message, SamplingParams
from engine.backends.llama.rpc import probe_worker
from engine.interface import Capabilities
from engine.sizing.load_spec import LoadSpec
from engine.workers.child import WorkerLost, open_split, ready_line
from engine.workers.connect import open_machine
from engine.workers.machines import WorkerMachine, check_address
from test_capabilities import SERVERS_OWN, assert_narrow
from gguf_copy import with_metadata
from rpc_workers import ROOT, free_port, kill_mid_reply, sshd, start_worker
from test_serve_reasoning import QWEN3, thinking_engine  # noqa: F401 (a fixture: the same model, Qwen3's template)


ASK = [Message("system", "You are brief."), Message("user", "Name three colours.")]


def ssh_machine(addr: str, key, data) -> WorkerMachine:
    """This checkout's worker as an SSH machine would run it (its own data folder, one thread)."""
    return WorkerMachine(addr, name="laptop", identity=str(key),
                   command=f"env HEARTH_DATA_DIR={data} {sys.executable} -m engine worker --threads 1")


def test_a_model_on_a_worker_and_an_ssh_machine_runs_apart_and_names_the_worker_that_went_away(
        tmp_path, bundled_path, engine):
    direct, proc = start_worker(tmp_path, "direct")
    with sshd(tmp_path / "ssh") as (addr, key):
        laptop = ssh_machine(addr, key, tmp_path)
        eng = open_split(LoadSpec(model=str(bundled_path), context=2048, exactness="exact"),
                         [WorkerMachine(direct), laptop], data_dir=tmp_path, n_threads=1)
        try:
            m = eng.describe()
            # The plan put the layers on both machines (Auto: they count as devices), as llama.cpp did.
            assert m.runtime == "rpc" and m.device.count("RPC0[") == 2 and m.local.n_gpu_layers > 0
            assert any("other machines" in n and "laptop" in n for n in m.notes)
            # reached through the child's API: its count route (exact), its model list (the bundled model's
            # template has no Think control)
            assert m.capabilities == Capabilities(exact_tokens=True, images=False, think=False, batching=False,
                                                  tunable=True, runs="workers", tools=True)
            assert_narrow(eng, lacks=SERVERS_OWN)
            assert eng.count_tokens(ASK) == engine.count_tokens(ASK) > 0
            tunnel = next(lk for lk in eng.links if lk.machine is laptop)
            assert tunnel.endpoint != tunnel.remote and tunnel.round_trip_ms > 0
            first = list(eng.stream([Message("user", "Name three colours.")],
                                    SamplingParams(temperature=0.0, max_tokens=8)))[-1]
            assert first.text and first.finish_reason == "max_tokens"
            got, lost = kill_mid_reply(eng, proc, WorkerLost)  # kill -9 the direct worker mid-reply
            assert lost.machines == (direct,) and direct in str(lost) and "reload" in str(lost)
            assert got  # what came before stays the caller's
        finally:
            eng.close()
            proc.kill()
            proc.wait(10)
        assert eng.proc.poll() is not None  # the model's process is gone with the engine
        deadline = time.monotonic() + 10
        while True:  # the SSH session ended, so the worker it started there exits too
            try:
                probe_worker(tunnel.remote, timeout=1.0)
            except HearthError:
                break
            assert time.monotonic() < deadline, "the SSH machine's worker outlived its session"
            time.sleep(0.2)


def test_an_ssh_machine_that_cannot_start_a_worker_says_why(tmp_path):
    with sshd(tmp_path / "ssh") as (addr, key):
        bad = WorkerMachine(addr, identity=str(key), command="no-such-hearth-worker")
        with pytest.raises(HearthError, match="could not start a worker on .* over SSH: .*no-such-hearth-worker"):
            open_machine(bad, tmp_path, timeout=20)
        stranger = WorkerMachine(addr, identity=str(tmp_path / "ssh" / "host_ed25519"))  # a key sshd does not know
        with pytest.raises(HearthError, match="over SSH: .*Permission denied"):
            open_machine(stranger, tmp_path, timeout=20)


def test_machine_addresses_are_a_worker_or_user_at_host():
    for ok in ("127.0.0.1:50052", "gpu-box.local:50052", "ann@gpu-box", "ann@10.0.0.5:2222", "ann@[::1]:2222"):
        check_address(ok)
    # llama.cpp's client cuts an endpoint at its first ":" (an IPv6 worker is reached over SSH); ports stop at
    # 65535 (glibc would wrap 70000 to 4464); a leading "-" would be an ssh option.
    for bad in ("gpu-box", "ann@", "http://x:1", "a b:1", "ann@host; rm -rf ~", "[::1]:50052", "host:70000",
                "host:0", "-oProxyCommand=touch@x", "ann@-oProxyCommand=x"):
        with pytest.raises(HearthError, match="host:port"):
            check_address(bad)
    with pytest.raises(HearthError, match="cannot be read"):
        WorkerMachine("ann@gpu-box", command="hearth-worker 'unclosed")


def test_the_ssh_command_passes_the_host_after_the_options_and_the_port_apart(tmp_path):
    from engine.workers.ssh import ssh_command

    cmd = ssh_command(WorkerMachine("ann@[::1]:2222", identity="/k"), 4000, 30000, tmp_path / "known_hosts")
    assert cmd[-4:] == ["ann", "--", "::1", "hearth-worker --port 30000 --until-stdin-closes"] and cmd[-5] == "-l"
    assert cmd[cmd.index("-p") + 1] == "2222" and "-L" in cmd and "127.0.0.1:4000:127.0.0.1:30000" in cmd
    assert "ControlMaster=no" in cmd and any(str(tmp_path / "known_hosts") in c for c in cmd)


def test_a_worker_beyond_loopback_answers_only_the_addresses_it_allows(tmp_path):
    """127.0.0.2 is this machine, but not an address run_worker takes for loopback: it needs --unsafe-listen,
    and then --allow; the RPC server itself stays on 127.0.0.1 behind the relay."""
    out = subprocess.run([sys.executable, "-m", "engine", "worker", "--host", "127.0.0.2", "--port",
                          str(free_port()), "--unsafe-listen"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "needs --allow" in out.stderr
    ok, p1 = start_worker(tmp_path, "allowed", "--unsafe-listen", "--allow", "127.0.0.0/8", host="127.0.0.2")
    try:
        assert probe_worker(ok).major == 7
        assert "WARNING" in (tmp_path / "allowed.txt").read_text()
    finally:
        p1.kill()
        p1.wait(10)
    port = free_port()
    log = open(tmp_path / "refusing.txt", "w")
    p2 = subprocess.Popen([sys.executable, "-m", "engine", "worker", "--host", "127.0.0.2", "--port", str(port),
                           "--unsafe-listen", "--allow", "10.0.0.0/8"], cwd=ROOT, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while "refused a connection" not in (tmp_path / "refusing.txt").read_text():
            with pytest.raises(HearthError):
                probe_worker(f"127.0.0.2:{port}", timeout=1.0)
            assert time.monotonic() < deadline and p2.poll() is None
            time.sleep(0.2)
    finally:
        p2.kill()
        p2.wait(10)


def test_a_model_the_child_cannot_load_says_why_and_leaves_the_worker_ready(tmp_path):
    direct, proc = start_worker(tmp_path, "direct")
    try:
        with pytest.raises(HearthError, match="could not be loaded over the machines: .*not found"):
            open_split(LoadSpec(model=str(tmp_path / "missing.gguf"), source="gguf"), [WorkerMachine(direct)],
                       data_dir=tmp_path, n_threads=1)
        assert probe_worker(direct).major == 7  # the worker is untouched, ready for the next load
    finally:
        proc.kill()
        proc.wait(10)


def test_the_child_ends_when_the_window_that_started_it_does(tmp_path, bundled_path):
    """Its stdin is the window's: a window that crashes (and so closes it) takes the child and its model along."""
    direct, proc = start_worker(tmp_path, "direct")
    try:
        eng = open_split(LoadSpec(model=str(bundled_path), context=1024, exactness="exact"),
                         [WorkerMachine(direct)], data_dir=tmp_path, n_threads=1)
        try:
            assert eng.proc.poll() is None
            eng.proc.stdin.close()  # what the end of the window's process does
            eng.proc.wait(15)
        finally:
            eng.close()
        assert probe_worker(direct).major == 7  # and the worker is free for the next one
    finally:
        proc.kill()
        proc.wait(10)


def test_a_split_models_child_says_it_is_ready_in_one_json_line():
    line = 'HEARTH-READY {"url": "http://127.0.0.1:40001/v1", "model": "smol"}\n'
    assert ready_line(line) == {"url": "http://127.0.0.1:40001/v1", "model": "smol"}
    for bad in ("HEARTH-READY http://127.0.0.1:40001/v1", 'HEARTH-READY {"url": "http://127.0.0.1:1/v1"}'):
        with pytest.raises(HearthError, match="not whole"):
            ready_line(bad)


def test_a_split_models_think_control_and_counts_come_through_the_childs_api(tmp_path, bundled_path,
                                                                              thinking_engine):  # noqa: F811
    """The bundled model under Qwen3's template (its enable_thinking switch), split over one worker: the parent
    offers the child's Think control, counts as the child's model does, and the choice reaches its template."""
    model = with_metadata(bundled_path, tmp_path / "smol-qwen3.gguf", {"tokenizer.chat_template": QWEN3})
    direct, proc = start_worker(tmp_path, "direct")
    try:
        eng = open_split(LoadSpec(model=str(model), context=1024, exactness="exact"), [WorkerMachine(direct)],
                         data_dir=tmp_path, n_threads=1)
        try:
            m = eng.describe()
            assert m.think == thinking_engine.think and m.think is not None and m.think.variable == "enable_thinking"
            assert m.capabilities.think and m.capabilities.exact_tokens
            assert_narrow(eng, lacks=SERVERS_OWN)  # the child's queue, raw text and image count stay the child's
            assert m.local is not None and m.local.n_gpu_layers > 0  # the child's own figures, for its process
            ask, off = [Message("user", "Say hi.")], {"enable_thinking": False}
            assert eng.count_tokens(ask) == thinking_engine.count_tokens(ask)
            assert eng.count_tokens(ask, off) == thinking_engine.count_tokens(ask, off) > eng.count_tokens(ask)
            final = list(eng.stream(ask, SamplingParams(temperature=0.0, max_tokens=2), template_kwargs=off))[-1]
            assert final.stats.prompt_tokens == thinking_engine.count_tokens(ask, off)  # the choice was applied
        finally:
            eng.close()
    finally:
        proc.kill()
        proc.wait(10)

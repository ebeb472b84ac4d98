"""``python -m engine bench rpc``: a model on llama.cpp RPC workers over loopback, against all local.

In one interleaved run (each round runs every side once, the order alternating), with the same
total CPU threads on each side, it measures prefill (512 tokens) and decode (128 tokens after a
short prompt, greedy) through Hearth's engine, exact profile (a worker's buffers are never
repacked, so that is the fair comparison), prefix cache off:

- ``local``: every layer here, on ``--threads`` threads (default 2);
- ``one worker``: every layer on one ``engine worker`` with those threads;
- ``two workers``: the layers split over two workers with half the threads each.

``--gpu-check`` puts every layer on the GPU instead: local on this process's GPU, the workers on theirs
(scripts/gpu_check.sh runs it on the first GPU lent).

Workers run in processes of their own on 127.0.0.1, so the figures are the protocol's cost (a
round trip per call, the activations copied), not a network's: a LAN adds its round trip times
about three calls a token. A side's ratio is the median of its per-round ratios to ``local``'s
figure from the same round (pairing.py), with their range and 90% interval; the one-worker decode
bar (0.9x) is read against that interval.
llama.cpp's own measurement (PR #6829, TinyLlama F16 on CUDA) was 60 against 63 tok/s over
localhost RPC.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .pairing import columns, verdict, versus
from .speed import N_GEN, PP, HearthSide, Side, _median, clean_env

ROOT = Path(__file__).resolve().parents[2]


class RpcSide(HearthSide):
    """Hearth with every layer on the workers at ``endpoints`` (none: all here, on this machine's GPU with
    ``gpu``)."""

    def __init__(self, path: Path, threads: int, endpoints: list[str], gpu: bool = False) -> None:
        from ..backends.llama.rpc import add_worker
        from ..config import EngineConfig
        from ..engine import Engine

        for ep in endpoints:
            add_worker(ep)
        self.engine = Engine.open(EngineConfig(path, n_ctx=4096, n_threads=threads, exactness="exact",
                                               cache_budget=0, n_gpu_layers=-1 if endpoints or gpu else 0))


def side_main(path: str, threads: int, where: str, endpoints: list[str]) -> None:
    """One side in its own process: registration is process-wide, and a lost worker aborts it."""
    s = RpcSide(Path(path), threads, endpoints, gpu=where == "gpu")
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        print(round(s.prefill(int(cmd[1])) if cmd[0] == "pp" else s.decode(), 3), flush=True)


def _worker(folder: Path, threads: int, procs: list[subprocess.Popen]) -> str:
    from ..backends.llama.rpc import probe_worker
    from ..errors import HearthError
    from ..workers.machines import free_loopback_port

    port = free_loopback_port()
    with open(folder / f"w{port}.txt", "w") as err:
        p = subprocess.Popen([sys.executable, "-m", "engine", "worker", "--port", str(port), "--threads",
                              str(threads), "--no-cache"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                             env={**clean_env(), "HEARTH_DATA_DIR": str(folder)})
    procs.append(p)  # the caller stops it, whatever happens next
    deadline = time.monotonic() + 60
    while True:
        try:
            probe_worker(f"127.0.0.1:{port}")
            return f"127.0.0.1:{port}"
        except HearthError:
            if p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"bench rpc: a worker did not start: {(folder / f'w{port}.txt').read_text()[-400:]}")
            time.sleep(0.2)


def bench_rpc(a: argparse.Namespace) -> dict[str, Any]:
    from ..models.catalogue import bundled_model_path

    path = Path(a.model) if getattr(a, "model", None) and a.model != "bundled" else bundled_model_path()
    threads = getattr(a, "threads", None) or min(2, os.cpu_count() or 2)
    gpu = bool(getattr(a, "gpu_check", False))  # every layer on this machine's GPU, the workers' too
    half = max(1, threads // 2)
    procs: list[subprocess.Popen] = []
    sides: dict[str, Side] = {}
    with tempfile.TemporaryDirectory(prefix="hearth-bench-rpc-") as tmp:
        try:
            one = _worker(Path(tmp), threads, procs)
            two = [_worker(Path(tmp), half, procs) for _ in range(2)]
            plan = {"local": [], "one worker": [one], "two workers": two}
            # The client computes nothing but the input rows when every layer is elsewhere: one thread. With a
            # GPU the workers use it and the client does not see it (else llama.cpp splits over both).
            where = "gpu" if gpu else "cpu"
            hide = {**clean_env(), "CUDA_VISIBLE_DEVICES": "", "GGML_VK_VISIBLE_DEVICES": ""} if gpu else None
            sides = {name: Side(name, path, threads if not eps else 1, module="engine.bench.rpc",
                                extra=(where, *eps), env=hide if eps else None)
                     for name, eps in plan.items()}
            got = _rounds(sides, max(1, a.rounds))
        finally:
            for s in sides.values():
                s.close()
            for p in procs:
                p.kill()
                p.wait(10)
    return {"bench": "rpc", "model": path.name, "threads": threads, "rounds": a.rounds, "device": where,
            "reference": f"the same model all local ({where}), {threads} threads, same run", **rpc_ratios(got)}


def rpc_ratios(got: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """The sides' medians, each against ``local`` round by round, and the one-worker decode bar (0.9x):
    ``meets`` by the paired median, ``bar`` by its interval (met, not met, within noise)."""
    pairs = versus(got, "local")
    cols = {name: columns(p, "vs_local") for name, p in pairs.items()}
    decode = pairs["one worker"][f"tg{N_GEN}"]
    return {"tok_s": {name: {k: _median(v) for k, v in g.items()} for name, g in got.items()},
            **{k: {name: c[k] for name, c in cols.items()} for k in ("vs_local", "vs_local_range", "vs_local_ci")},
            "ci_coverage": decode["coverage"],
            "meets": {"decode_one_worker_at_least_0.9": decode["median"] >= 0.9},
            "bar": {"decode_one_worker_at_least_0.9": verdict(decode["ci"][0], decode["ci"][1], 0.9,
                                                              decode["coverage"])}}


def _rounds(sides: dict[str, Side], rounds: int) -> dict[str, dict[str, list[float]]]:
    got: dict[str, dict[str, list[float]]] = {}
    order = list(sides.items())
    for r in range(rounds + 1):  # round 0 warms up: weights paged in (and sent to the workers), buffers made
        for name, side in (order if r % 2 == 0 else order[::-1]):
            pp, tg = side.ask(f"pp {PP}"), side.ask("tg")
            if r:
                got.setdefault(name, {}).setdefault(f"pp{PP}", []).append(pp)
                got[name].setdefault(f"tg{N_GEN}", []).append(tg)
    return got


if __name__ == "__main__":
    side_main(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:])

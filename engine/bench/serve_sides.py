"""The two servers ``bench serve`` drives: Hearth's ``engine serve`` and llama-server, matched.

Both run in their own process on 127.0.0.1, on the same model file, threads and per-sequence
context, each with ``parallel`` sequences decoded together:

- Hearth: ``engine serve --parallel N --ctx C`` (C per sequence: the engine core opens one
  llama.cpp context of N sequences, a KV stream each of C tokens), in a data folder of its own (no
  settings or disk cache of the user's), speculation off unless asked (``--draft``).
- llama-server, built from the llama.cpp this llama-cpp-python vendors (llama_tools.py): ``-np N``
  (continuous batching, on by default) with ``-c N*C`` and ``--no-kv-unified``: llama-server's ``-c``
  is the whole context over its slots, which llama.cpp divides into N streams of C each (C a
  multiple of 256, as llama.cpp pads a stream to 256). Its ``/props`` says what each slot got, and
  the run checks it.

The exactness profile decides the kernels on both: "fast" (Hearth's default) is llama.cpp's own
defaults, flash attention on auto (on for the CPU), repack on, and so llama-server runs
``-fa auto`` with repack; "exact" is ``-fa off --no-repack`` and the tiled K-quant matmul off
(``GGML_CPU_TILED_MM=0``), where llama-server keeps tinyBLAS (its build has no switch for it).
"""
from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .remote import serve_process
from .speed import clean_env

STREAM_PAD = 256   # llama.cpp rounds a KV stream up to a multiple of this (llama-context.cpp)
READY_S = 180.0    # a server that has not answered /health by then has failed to start


def per_sequence(n_ctx: int) -> int:
    """The per-sequence context both sides get for a request of ``n_ctx``: rounded up to STREAM_PAD,
    which llama.cpp would do to llama-server's streams anyway, so Hearth gets the same."""
    return -(-max(1, n_ctx) // STREAM_PAD) * STREAM_PAD


def llama_server_command(binary: Path, model: Path, *, parallel: int, n_ctx_seq: int, threads: int, port: int,
                         exactness: str) -> list[str]:
    """llama-server with ``parallel`` slots of ``n_ctx_seq`` tokens each (``-c`` is their total), a KV
    stream per slot as Hearth has, on 127.0.0.1:``port``; greedy and ``ignore_eos`` come per request."""
    if n_ctx_seq % STREAM_PAD:
        raise ValueError(f"a slot's context must be a multiple of {STREAM_PAD}, not {n_ctx_seq}")
    kernels = ["-fa", "auto"] if exactness == "fast" else ["-fa", "off", "--no-repack"]
    return [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-np", str(parallel),
            "-c", str(parallel * n_ctx_seq), "--no-kv-unified", "-t", str(threads), "-tb", str(threads),
            "--fit", "off", "--no-webui", "--alias", model.stem, *kernels]


def llama_server_env(exactness: str) -> dict[str, str]:
    """llama-server's environment: ggml's switches as the profile has them, nothing inherited."""
    return {**clean_env(), **({"GGML_CPU_TILED_MM": "0"} if exactness == "exact" else {})}


def hearth_serve_args(model: Path, *, parallel: int, n_ctx_seq: int, threads: int, exactness: str,
                      draft: str = "none") -> list[str]:
    """``engine serve``'s arguments for the same load (``--port 0 --no-library`` are serve_process')."""
    return ["--model", str(model), "--parallel", str(parallel), "--ctx", str(n_ctx_seq), "--threads", str(threads),
            "--exactness", exactness, "--draft", draft]


@dataclass(frozen=True, slots=True)
class Setup:
    """One ``bench serve`` run's settings, the same for every side."""
    model: Path
    threads: int
    exactness: str
    tokens: int                 # max_tokens of a throughput request
    spec_tokens: int            # max_tokens of a speculation row's request (drafts pay more in longer replies)
    rounds: int
    levels: tuple[int, ...]     # the throughput row's concurrent streams
    per_stream: int             # requests each stream sends one after another in a round
    n_ctx_seq: int              # the throughput row's context per sequence
    workdir: Path               # logs and the Hearth servers' data folders
    llama_server: Path | None   # the binary (None: no row runs llama-server)
    quick: bool = False


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on now (llama-server takes no port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """One running server: its process, its OpenAI base URL, the model id it answers to, what it loaded."""
    name: str
    proc: subprocess.Popen
    url: str
    model_id: str
    log: Path
    loaded: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL past 30 s) and wait for it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_hearth(name: str, model: Path, workdir: Path, *, parallel: int, n_ctx_seq: int, threads: int,
                 exactness: str, draft: str = "none") -> Server:
    """``engine serve`` for the run, its data folder under ``workdir`` (a fresh install's: no settings, no
    disk cache of the user's); what it loaded read from its start-up line (context per sequence, device)."""
    data = workdir / f"{name}-data"
    data.mkdir(parents=True, exist_ok=True)
    env = {**clean_env(), "HEARTH_DATA_DIR": str(data)}
    log = workdir / f"{name}.log"
    proc, url = serve_process(hearth_serve_args(model, parallel=parallel, n_ctx_seq=n_ctx_seq, threads=threads,
                                                exactness=exactness, draft=draft), log, env=env)
    server = Server(name, proc, url, "", log)
    try:
        server.model_id = _model_id(url)
        server.loaded = hearth_loaded(log.read_text(errors="replace"))
    except BaseException:
        server.close()
        raise
    return server


def hearth_loaded(log: str) -> dict[str, Any]:
    """What ``engine serve`` says it loaded: ``loaded NAME: QUANT, context N, runs on RUNTIME (DEVICE), K layers
    offloaded, speculation MODE``."""
    m = re.search(r"^loaded .*?: .*?, context ([\d,]+), runs on (\S+) \((.*?)\), (\d+) layers offloaded, "
                  r"speculation (\S+)", log, re.M)
    if m is None:
        return {}
    return {"n_ctx_seq": int(m.group(1).replace(",", "")), "runtime": m.group(2), "device": m.group(3),
            "gpu_layers": int(m.group(4)), "speculation": m.group(5)}


def start_llama_server(binary: Path, model: Path, workdir: Path, *, parallel: int, n_ctx_seq: int, threads: int,
                       exactness: str) -> Server:
    """llama-server for the run, ready (``/health`` answers 200), with what ``/props`` says each slot got."""
    port = free_port()
    log = workdir / f"llama-server-np{parallel}.log"
    cmd = llama_server_command(binary, model, parallel=parallel, n_ctx_seq=n_ctx_seq, threads=threads, port=port,
                               exactness=exactness)
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=llama_server_env(exactness))
    server = Server("llama-server", proc, f"http://127.0.0.1:{port}/v1", model.stem, log)
    try:
        props = _wait_ready(proc, port, log)
        settings = props.get("default_generation_settings") or {}
        server.loaded = {"n_ctx_seq": settings.get("n_ctx"), "slots": props.get("total_slots"),
                         "command": " ".join(cmd[1:])}
    except BaseException:
        server.close()
        raise
    return server


def _wait_ready(proc: subprocess.Popen, port: int, log: Path) -> dict[str, Any]:
    import httpx

    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server ended (exit {proc.returncode}): {_tail(log)}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return dict(httpx.get(f"http://127.0.0.1:{port}/props", timeout=5).json())
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"llama-server did not answer /health in {READY_S:.0f} s: {_tail(log)}")


def _model_id(url: str) -> str:
    from ..remote.connect import list_models

    return list_models(url)[0].id


def _tail(log: Path, n: int = 800) -> str:
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def counters(server: Server, prefix: str = "hearth:spec_decode_") -> dict[str, float]:
    """A Hearth server's counters under ``prefix`` from its ``GET /metrics`` (Prometheus' text; no labels)."""
    import httpx

    text = httpx.get(server.url.removesuffix("/v1") + "/metrics", timeout=10).text
    return {name.removeprefix(prefix): float(value) for name, _, value in
            (line.partition(" ") for line in text.splitlines() if line.startswith(prefix))}


def check_matched(hearth: Server, llama: Server, n_ctx_seq: int, parallel: int) -> list[str]:
    """What differs between the two servers' loads from what the run asked for (empty: matched)."""
    problems = []
    for s in (hearth, llama):
        got = s.loaded.get("n_ctx_seq")
        if got != n_ctx_seq:
            problems.append(f"{s.name} holds {got} tokens per sequence, not {n_ctx_seq}")
    if llama.loaded.get("slots") not in (None, parallel):
        problems.append(f"llama-server runs {llama.loaded.get('slots')} slots, not {parallel}")
    return problems


def say(text: str, out: IO[str] | None = None) -> None:
    """Progress on stderr (the JSON goes to stdout)."""
    print(text, file=out or sys.stderr, flush=True)


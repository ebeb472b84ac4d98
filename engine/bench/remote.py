"""``python -m engine bench remote``: the window on a server's model against the official client, same server, same run.

A user comparing Hearth's window on a remote model with any other client of that
server sees two figures: how fast the words come and how long the first one
takes. The server here is another Hearth (``engine serve`` in its own process,
127.0.0.1, the bundled model or ``--models``, one thread unless ``--threads``); the reference is the ``openai``
client streaming the same greedy request from it. ``python -m app --bench-stream
--model URL#id`` alternates the two (app/window/bench_remote.py) and this prints
its medians: tok/s as the window shows it over the client's (the target is at
least 0.97), and the TTFT the window adds (the target is at most 15 ms).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def serve_process(args: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """``engine serve --port 0 --no-library ARGS`` in its own process (stderr to ``log``: llama.cpp's load log
    would fill a pipe): the process and the URL it prints."""
    err = open(log, "w")
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--port", "0", "--no-library", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    err.close()  # the child holds its own copy
    line = proc.stdout.readline() if proc.stdout else ""
    if "Hearth serving" not in line:
        proc.kill()
        raise RuntimeError(f"the server did not start: {log.read_text()[-600:]}")
    return proc, line.split(" at ")[1].split(";")[0].split(" ")[0]


def bench_remote(a: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    model = (a.models or "bundled").split(",")[0]
    with tempfile.TemporaryDirectory(prefix="hearth-bench-remote-") as tmp:
        # One core for the server, the rest for the window and the client, as two machines would have: on one
        # small machine a server on every core makes the window's drawing slow the server's prefill, which is
        # no cost of the window's (measured on 2 cores: +19-24 ms TTFT that way, +1-10 ms with one).
        threads = str(getattr(a, "threads", None) or 1)
        proc, url = serve_process(["--model", model, "--threads", threads], Path(tmp) / "server.txt")
        try:
            from ..remote.connect import list_models

            model_id = list_models(url)[0].id
            p = subprocess.run([sys.executable, "-m", "app", "--bench-stream", "--model", f"{url}#{model_id}",
                                "--tokens", str(a.tokens), "--rounds", str(a.rounds)], cwd=ROOT,
                               capture_output=True, text=True)
        finally:
            proc.terminate()
            proc.wait(30)
    lines = p.stdout.strip().splitlines()
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {"ok": False, "problems": [p.stderr[-600:]]}
    if result.get("ok"):
        result["meets"] = {"tok_s_ratio_at_least_0.97": result["ratio"] >= 0.97,
                           "ttft_added_at_most_15_ms": result["ttft_added_ms"] <= 15.0}
    return {"bench": "remote", "server_kind": "another Hearth (engine serve, 127.0.0.1)",
            "reference": "openai client, same server, alternating", **result}

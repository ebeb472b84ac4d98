"""A model that uses other machines' workers runs in a private child process.

llama.cpp's RPC client aborts the whole process when a worker goes away (GGML_ABORT), so the window
never registers a worker itself. :func:`open_split` opens each machine (an SSH machine's tunnel stays in
this process), starts ``engine serve --load REQUEST --rpc ENDPOINT...`` on a free loopback port with a
random key, and returns a :class:`SplitEngine`: the remote engine's client to that child, which says
what was loaded as the child's planned load describes it, counts tokens exactly and offers the model's
Think control through the child's API (it is a Hearth server: its count route and its model list), and
turns a cut reply into the name of the worker that went away. The child says it is ready in one JSON
line (``HEARTH-READY {"url", "model"}``) after the one that says what it loaded (``HEARTH-LOADED``).
"""
from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import Cancelled, HearthError
from ..interface import Capabilities, ModelInfo
from ..sizing.load_spec import LoadSpec
from ..prompt.messages import Message
from ..remote.connect import client_for
from ..remote.engine import RemoteEngine
from ..remote.errors import RemoteError
from ..remote.pins import MemoryPins
from ..types import SamplingParams, StreamEvent
from .connect import open_machine
from .machines import Link, WorkerMachine

READY = "HEARTH-READY "    # engine/cli/serve.py prints both for a parent process
LOADED = "HEARTH-LOADED "


class WorkerLost(HearthError):
    """A worker stopped answering mid-reply; ``machines``: the addresses of those that did (the window offers
    to reload without them). The message names each as ``label [address]``."""

    def __init__(self, message: str, machines: Sequence[str]) -> None:
        super().__init__(message)
        self.machines = tuple(machines)


def lost_text(labels: Sequence[tuple[str, str]]) -> str:
    """The one wording of a lost machine, (label, address) each: the window finds ``[address]`` in it."""
    names = ", ".join(f"{label} [{address}]" if label != address else f"[{address}]" for label, address in labels)
    return (f"the machine {names} stopped answering in the middle of the reply, and the model's layers there "
            "went with it; reload the model without it, or start its worker again and reload")


class SplitEngine(RemoteEngine):
    """The engine interface for a model split over workers, served by a child process of this one."""

    def __init__(self, remote: RemoteEngine, *, proc: subprocess.Popen, links: list[Link], loaded: ModelInfo,
                 log: Path, scratch: Path | None = None) -> None:
        super().__init__(remote.client, remote.model, label=loaded.label, counter=remote.counter,
                         think=remote.describe().think)
        self.proc, self.links, self.log, self.scratch = proc, links, log, scratch
        self._n_ctx = loaded.n_ctx
        where = ", ".join(f"{lk.machine.label} ({lk.round_trip_ms:.1f} ms round trip)" for lk in links)
        self._loaded = replace(loaded, notes=(*loaded.notes, f"layers on other machines: {where}; the model runs in "
                                              "a process of its own, so a machine that goes away cannot take "
                                              "the window with it"), think=self._think,
                               capabilities=self.capabilities(loaded))

    def capabilities(self, loaded: ModelInfo | None = None) -> Capabilities:
        """The child's model as this side reaches it: through the remote engine's client, which counts with
        the child's model (its count route) and sets the Think control the child's model list describes; it
        sees images where the child loaded a projector (and counts them there); one request at a time from
        here; its settings are this machine's (the child runs the file). Tools go as OpenAI's, for the child
        to parse, as the remote engine sends them."""
        loaded = self._loaded if loaded is None else loaded
        return Capabilities(exact_tokens=self.counter.exact, images=loaded.capabilities.images,
                            think=self._think is not None, batching=False, tunable=True, runs="workers", tools=True)

    def describe(self) -> ModelInfo:
        return self._loaded

    def stream(self, messages: Sequence[Message | Mapping[str, Any]], params: SamplingParams | None = None, *,
               cancel: threading.Event | None = None, **kw: Any) -> Iterator[StreamEvent]:
        try:
            yield from super().stream(messages, params, cancel=cancel, **kw)
        except RemoteError as e:
            if e.kind == "cancelled":
                raise
            raise self.why(e) from None

    def why(self, error: RemoteError) -> HearthError:
        """What a failed reply means here. llama.cpp's RPC client aborts its process when a worker goes away,
        so a lost worker shows as the child ending; only then are the workers asked (while the child holds
        them they answer no one else: each serves one client at a time). A child still running means the
        error is the reply's own."""
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            return error
        gone = [(lk.machine.label, lk.machine.address) for lk in self.links if not lk.alive()]
        if gone:
            return WorkerLost(lost_text(gone), [a for _, a in gone])
        return HearthError(f"the model's process ended ({_tail(self.log)}); reload the model")

    def close(self) -> None:
        super().close()
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the child exits when its input ends (so it does if this process dies)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        for lk in self.links:
            lk.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def open_split(req: LoadSpec, machines: Sequence[WorkerMachine], *, data_dir: Path | None,
               cancel: threading.Event | None = None, n_threads: int | None = None) -> SplitEngine:
    """Open every machine, then load ``req`` over their workers in a child ``engine serve``."""
    links: list[Link] = []
    try:
        for m in machines:
            links.append(open_machine(m, data_dir))
        return _start_child(req, links, data_dir, cancel, n_threads)
    except BaseException:
        for lk in links:
            lk.close()
        raise


def _start_child(req: LoadSpec, links: list[Link], data_dir: Path | None, cancel: threading.Event | None,
                 n_threads: int | None) -> SplitEngine:
    key = secrets.token_urlsafe(32)
    scratch = None if data_dir is not None else Path(tempfile.mkdtemp(prefix="hearth-split-"))
    folder = Path(data_dir) / "logs" if data_dir is not None else scratch
    assert folder is not None
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="split-model-", suffix=".log", dir=folder)  # llama.cpp's load log
    args = [sys.executable, "-m", "engine", "serve", "--port", "0", "--no-library", "--parallel", "1",
            "--load", json.dumps(req.as_dict())]
    if n_threads:
        args += ["--threads", str(n_threads)]
    for lk in links:
        args += ["--rpc", lk.endpoint]
    env = {**os.environ, "HEARTH_CHILD_KEY": key}
    if data_dir is not None:
        env["HEARTH_DATA_DIR"] = str(data_dir)
    with os.fdopen(fd, "w") as err:
        # stdin stays open for the child's life: it exits when it ends, so a window that dies takes it along.
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.PIPE, env=env, text=True)
    log = Path(name)
    try:
        ready, loaded = _wait_ready(proc, log, cancel)
        remote = RemoteEngine.open(client_for(ready["url"], key, pins=MemoryPins()), ready["model"], cancel=cancel)
        return SplitEngine(remote, proc=proc, links=links, loaded=loaded, log=log, scratch=scratch)
    except BaseException:
        proc.kill()
        proc.wait(10)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise


def _wait_ready(proc: subprocess.Popen, log: Path,
                cancel: threading.Event | None) -> tuple[dict[str, str], ModelInfo]:
    """Where the child serves (``{"url", "model"}``) and what it loaded, from its stdout's machine-readable
    lines as they come (read on a thread, so that two lines arriving together are both seen; Cancel stops
    the wait); the lines for people are passed over."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                lines.put(line)
        except (ValueError, OSError):  # closed by SplitEngine.close
            pass
        lines.put("")

    threading.Thread(target=read, daemon=True, name="hearth-split-child").start()
    loaded = None
    while True:
        if cancel is not None and cancel.is_set():
            raise Cancelled("the load was cancelled")
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            continue
        if not line:
            proc.wait(10)
            raise HearthError(f"the model could not be loaded over the machines: {_tail(log)}")
        if line.startswith(LOADED):
            loaded = ModelInfo.from_dict(json.loads(line[len(LOADED):]))
        elif line.startswith(READY) and loaded is not None:
            return ready_line(line), loaded


def ready_line(line: str) -> dict[str, str]:
    """The child's ``HEARTH-READY {"url", "model"}`` line; HearthError for one that is not whole."""
    try:
        d = json.loads(line[len(READY):])
    except ValueError:
        d = None
    if not isinstance(d, dict) or not all(isinstance(d.get(k), str) and d[k] for k in ("url", "model")):
        raise HearthError(f"the model's process said it was ready in a line that is not whole: {line.strip()[:120]!r}")
    return {"url": d["url"], "model": d["model"]}


def _tail(log: Path) -> str:
    """The child's last error line (``hearth: error: ...``, or llama.cpp's), for the user."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    for ln in reversed(lines):
        if ln.startswith("hearth: error:"):
            return ln[len("hearth: error:"):].strip()
    errs = [ln for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    return (errs or lines or ["no message"])[-1][-300:]

"""The machines a user adds for their devices: ``host:port`` (a worker) or ``user@host`` (over SSH).

A machine is opened into a :class:`Link`: the loopback endpoint this process reaches its worker at (an
SSH machine's worker is started there and its port forwarded here), the worker's devices as the probe
sees them, and the link's measured round trip. Nothing here registers a worker with llama.cpp: that is
the child process's job (engine/workers/child.py), because a lost worker aborts the process it is in.
"""
from __future__ import annotations

import re
import shlex
import socket
import subprocess
from dataclasses import dataclass, field

from ..backends.llama.rpc import probe_worker
from ..errors import HearthError

WORKER_COMMAND = "hearth-worker"   # what starts a worker on an SSH machine (an installed Hearth's entry point)
ROUND_TRIPS_PER_TOKEN = 3          # a decode step's RPC calls per worker: inputs in, compute, the result back
_NAME = r"[A-Za-z0-9_.][A-Za-z0-9._-]*"   # never a leading "-": ssh would read it as an option
# A worker: a name or an IPv4 address and a port (llama.cpp's client cuts an endpoint at its first ":", so a
# worker is reached over IPv6 through SSH). An SSH machine: user@host, host an IPv6 address in brackets too.
_WORKER_RE = re.compile(rf"^(?P<host>{_NAME}):(?P<port>\d{{1,5}})$")
_SSH_RE = re.compile(rf"^(?P<user>{_NAME})@(?P<host>{_NAME}|\[[0-9a-fA-F:.]+\])(?::(?P<port>\d{{1,5}}))?$")


@dataclass(frozen=True, slots=True)
class WorkerMachine:
    """``address``: ``host:port`` of a worker (``engine worker``), or ``user@host[:ssh-port]`` for a
    machine Hearth starts the worker on over SSH (``command`` there, ``identity`` the SSH key file;
    default ssh's own). ``name``: what the user calls it."""
    address: str
    name: str = ""
    command: str = WORKER_COMMAND
    identity: str | None = None

    def __post_init__(self) -> None:
        check_address(self.address)
        try:
            ok = bool(shlex.split(self.command))
        except ValueError as e:
            raise HearthError(f"the worker command {self.command!r} cannot be read: {e}") from None
        if not ok:
            raise HearthError("the worker command is empty: it is what starts a worker there, hearth-worker")

    @property
    def ssh_parts(self) -> tuple[str, str, int | None]:
        """(user, host without brackets, SSH port or None) of a ``user@host[:port]`` machine."""
        m = _SSH_RE.match(self.address)
        assert m is not None  # checked when made
        return m["user"], m["host"].strip("[]"), int(m["port"]) if m["port"] else None

    @property
    def ssh(self) -> bool:
        return "@" in self.address

    @property
    def label(self) -> str:
        return self.name or self.address

    def to_dict(self) -> dict:
        return {"address": self.address, "name": self.name, "command": self.command, "identity": self.identity}

    @classmethod
    def from_dict(cls, d: dict) -> "WorkerMachine":
        return cls(str(d["address"]), str(d.get("name") or ""), str(d.get("command") or WORKER_COMMAND),
                   d.get("identity") or None)


def free_loopback_port() -> int:
    """A port no one listens on at 127.0.0.1 now (the caller binds it next: a worker, a tunnel's end, a relay's
    target, a benchmark's server)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


def is_address(text: str) -> bool:
    """Whether ``text`` is a machine's address: ``host:port`` or ``user@host[:port]``, ports 1-65535."""
    m = _WORKER_RE.match(text) or _SSH_RE.match(text)
    return m is not None and (m["port"] is None or 0 < int(m["port"]) < 65536)


def check_address(address: str) -> None:
    """HearthError unless ``address`` is ``host:port`` or ``user@host[:port]``."""
    if not is_address(address):
        raise HearthError(f"a machine is host:port (a worker it runs; an IPv4 address or a name, port 1-65535) or "
                          f"user@host (Hearth starts the worker over SSH), not {address!r}")


@dataclass(slots=True)
class Link:
    """An opened machine: ``endpoint`` is where this process reaches its worker (loopback for SSH)."""
    machine: WorkerMachine
    endpoint: str
    round_trip_ms: float = 0.0
    tunnel: subprocess.Popen | None = None
    remote: str = ""     # over SSH: the worker's address on its own machine (its loopback)
    memory: list[tuple[int, int]] = field(default_factory=list)  # (free, total) bytes of each device it serves
    notes: list[str] = field(default_factory=list)

    @property
    def cost_per_token_ms(self) -> float:
        """The link's expected cost per generated token: a decode step's round trips to this worker."""
        return ROUND_TRIPS_PER_TOKEN * self.round_trip_ms

    def alive(self) -> bool:
        """Whether the worker still answers (and, over SSH, the tunnel is up). A worker serves one client at a
        time: ask only when no model of this Hearth holds it (a busy worker does not answer either)."""
        if self.tunnel is not None and self.tunnel.poll() is not None:
            return False
        try:
            probe_worker(self.endpoint, timeout=2.0)
            return True
        except HearthError:
            return False

    def close(self) -> None:
        if self.tunnel is not None and self.tunnel.stdin is not None:
            self.tunnel.stdin.close()
        if self.tunnel is not None and self.tunnel.poll() is None:
            self.tunnel.terminate()  # the session ends: the worker there exits (it watches its stdin)
            try:
                self.tunnel.wait(5)
            except subprocess.TimeoutExpired:
                self.tunnel.kill()
                self.tunnel.wait(5)

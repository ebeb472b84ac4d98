"""A machine reached over SSH: Hearth starts the worker there and forwards its port here.

``ssh -L 127.0.0.1:LOCAL:127.0.0.1:REMOTE user@host -- hearth-worker --port REMOTE --until-stdin-closes``:
the worker binds the other machine's loopback, so its unauthenticated port is never on a network; SSH's
keys authenticate both ends and encrypt the link. The host key is trusted on first use and kept in the
data folder (``remote/known_hosts``); a changed one is refused by ssh itself. When the session ends
(Hearth closes the link, or the network drops) the worker's standard input closes and it exits.
"""
from __future__ import annotations

import random
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..backends.llama.rpc import probe_worker
from ..errors import HearthError
from .machines import Link, WorkerMachine, free_loopback_port


def ssh_command(machine: WorkerMachine, local: int, remote: int, known_hosts: Path | None) -> list[str]:
    ssh = shutil.which("ssh")
    if ssh is None:
        raise HearthError("adding a machine as user@host needs the ssh program (OpenSSH), which is not installed")
    user, host, port = machine.ssh_parts
    # No shared master connection (ControlMaster in the user's ssh config): the forward ends with this process.
    cmd = [ssh, "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=5",
           "-o", "ServerAliveCountMax=3", "-o", "ConnectTimeout=15", "-o", "StrictHostKeyChecking=accept-new",
           "-o", "ControlMaster=no", "-o", "ControlPath=none", "-L", f"127.0.0.1:{local}:127.0.0.1:{remote}"]
    if known_hosts is not None:  # Hearth's own, then the user's: a host already verified stays verified
        cmd += ["-o", f'UserKnownHostsFile="{known_hosts}" "{Path.home() / ".ssh" / "known_hosts"}"']
    if port:
        cmd += ["-p", str(port)]
    if machine.identity:
        cmd += ["-i", machine.identity, "-o", "IdentitiesOnly=yes"]
    worker = f"{machine.command} --port {remote} --until-stdin-closes"
    return [*cmd, "-l", user, "--", host, worker]


def open_ssh(machine: WorkerMachine, data_dir: Path | None, *, timeout: float = 60.0) -> Link:
    """Start ``machine``'s worker over SSH and forward it to a free loopback port here; the Link once
    the worker answers its HELLO through the tunnel. HearthError with ssh's own last line otherwise."""
    known = None
    folder = Path(data_dir) / "remote" if data_dir is not None else Path(tempfile.gettempdir())
    folder.mkdir(parents=True, exist_ok=True)
    if data_dir is not None:
        known = folder / "known_hosts"
    local, remote = free_loopback_port(), random.randint(20000, 59999)
    log = folder / f"ssh-{local}.log"   # ssh's messages (a pipe nobody reads could fill and stall it)
    with open(log, "w") as err:
        proc = subprocess.Popen(ssh_command(machine, local, remote, known), stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=err)
    endpoint = f"127.0.0.1:{local}"
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise HearthError(f"could not start a worker on {machine.label} over SSH: {_last_line(proc, log)}")
        try:
            probe_worker(endpoint, timeout=2.0)
            return Link(machine, endpoint, tunnel=proc, remote=f"127.0.0.1:{remote}")
        except HearthError:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait(5)
                raise HearthError(f"{machine.label} did not start a worker within {timeout:.0f} s over SSH "
                                  f"({_last_line(proc, log) or 'no message'}); is Hearth installed there, with "
                                  f"{shlex.split(machine.command)[0]} on its PATH?") from None
            time.sleep(0.3)


def _last_line(proc: subprocess.Popen, log: Path) -> str:
    text = log.read_text(errors="replace")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Warning: Permanently added")
             and "open failed: connect failed" not in ln]  # the probes' tries before the worker listened
    return lines[-1] if lines else f"ssh exited with status {proc.returncode}"

"""llama.cpp RPC workers on 127.0.0.1, and an sshd on a loopback port, standing in for other machines."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from engine import HearthError
from engine.backends.llama.rpc import probe_worker
from engine.workers.machines import free_loopback_port

ROOT = Path(__file__).resolve().parents[1]


free_port = free_loopback_port


def start_worker(folder: Path, name: str = "worker", *extra: str,
                 host: str = "127.0.0.1") -> tuple[str, subprocess.Popen]:
    """``engine worker`` on a free loopback port, one thread, its data in ``folder``; once it answers HELLO."""
    port = free_port()
    log = open(folder / f"{name}.txt", "w")
    p = subprocess.Popen([sys.executable, "-m", "engine", "worker", "--host", host, "--port", str(port),
                          "--threads", "1", *extra],
                         cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                         env={**os.environ, "HEARTH_DATA_DIR": str(folder)})
    deadline = time.monotonic() + 30
    while True:
        try:
            probe_worker(f"{host}:{port}")
            return f"{host}:{port}", p
        except HearthError:
            if p.poll() is not None or time.monotonic() > deadline:
                p.kill()
                pytest.fail((folder / f"{name}.txt").read_text())
            time.sleep(0.2)


@contextmanager
def sshd(folder: Path) -> Iterator[tuple[str, Path]]:
    """OpenSSH's sshd on a free loopback port with a throwaway host key, letting this user in with a
    throwaway client key only: (``user@127.0.0.1:port``, the client key file)."""
    import getpass
    import shutil

    binary = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(binary):
        pytest.fail("sshd is not installed: .ci/run installs openssh-server (apt-get install openssh-server)")
    folder.mkdir(parents=True, exist_ok=True)
    host_key, user_key = folder / "host_ed25519", folder / "user_ed25519"
    for k in (host_key, user_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(k)], check=True)
    (folder / "authorized_keys").write_text((folder / "user_ed25519.pub").read_text())
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
                      f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPasswordAuthentication no\n"
                      "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\n"
                      f"PidFile {folder / 'sshd.pid'}\nUsePAM no\nAllowTcpForwarding local\n"
                      "PermitUserEnvironment no\nLogLevel ERROR\n")
    try:
        os.makedirs("/run/sshd", exist_ok=True)  # its privilege-separation folder
    except PermissionError:
        pass  # not root: sshd runs as this user, without privilege separation
    proc = subprocess.Popen([binary, "-D", "-e", "-f", str(config)], stderr=open(folder / "sshd.txt", "w"))
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail((folder / "sshd.txt").read_text())
            time.sleep(0.1)
    try:
        yield f"{getpass.getuser()}@127.0.0.1:{port}", user_key
    finally:
        proc.terminate()
        proc.wait(10)


def kill_mid_reply(engine, worker: subprocess.Popen, error: type[BaseException]) -> tuple[str, BaseException]:
    """A long greedy reply from ``engine``, the ``worker`` killed -9 at its fifth piece: (the text that came,
    the ``error`` the reply ended with)."""
    from engine import Message, SamplingParams

    got: list[str] = []
    with pytest.raises(error) as e:
        for ev in engine.stream([Message("user", "Write a long story about a dragon.")],
                                SamplingParams(temperature=0.0, max_tokens=400)):
            got.append(ev.text)
            if len(got) == 5:
                worker.kill()
    return "".join(got), e.value

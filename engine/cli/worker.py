"""``python -m engine worker``: this machine's device as one more device for a Hearth elsewhere (llama.cpp RPC).

The RPC port has no key and no encryption, and a crafted request can crash or
subvert the worker (llama.cpp #25288, #25289, #26825, #26912). So it binds
127.0.0.1 unless ``--unsafe-listen`` says otherwise, and the way to use it from
another machine is an SSH tunnel, which Hearth's "Add a machine" (user@host)
opens: SSH's keys authenticate and encrypt the link, and the port never leaves
the worker's loopback.
"""
from __future__ import annotations

import os
import sys
import threading

from ..backends.llama.rpc import DEFAULT_PORT, serve_worker
from ..errors import HearthError

WARNING = ("WARNING: this worker listens on {host}, beyond this machine. Its port has no key and no encryption, "
           "and a crafted request can crash or take over this process. Never expose it to a network you do not "
           "control; prefer an SSH tunnel (Hearth's Add a machine: user@host).")


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def run_worker(host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, device: str | None = None, threads: int = 0,
               cache: bool = True, unsafe_listen: bool = False, allow: tuple[str, ...] = (),
               until_stdin_closes: bool = False) -> int:
    """Serve until killed (the RPC server never returns). Beyond loopback (``unsafe_listen``), the RPC
    server still binds 127.0.0.1 and only a relay that lets the ``allow`` addresses through listens on
    ``host``. ``until_stdin_closes``: exit when standard input ends (started over SSH: the session's end)."""
    relay = None
    if host not in LOOPBACK:
        if not unsafe_listen:
            raise HearthError(f"a worker binds 127.0.0.1 unless --unsafe-listen is given (asked for {host}); to use "
                              "it from another machine, reach it through SSH instead")
        from ..workers.machines import free_loopback_port
        from ..workers.relay import Relay, allow_list

        networks = allow_list(allow)
        inner = free_loopback_port()
        relay = Relay(host, port, ("127.0.0.1", inner), networks)
        print(WARNING.format(host=host), file=sys.stderr, flush=True)
        print(f"answering only {', '.join(str(n) for n in networks)}", file=sys.stderr, flush=True)
    cache_dir = None
    if cache:
        from ..paths import data_dir

        folder = data_dir() / "rpc-cache"  # tensors over 10 MiB by hash: a second load skips the network
        folder.mkdir(parents=True, exist_ok=True)
        cache_dir = str(folder)
    if until_stdin_closes:
        threading.Thread(target=exit_at_eof, daemon=True, name="hearth-worker-stdin").start()
    if relay is not None:
        relay.start()
        print(f"Hearth worker at {host}:{relay.address[1]}; Ctrl-C stops", flush=True)
        serve_worker("127.0.0.1", inner, device=device, threads=threads, cache_dir=cache_dir)
    else:
        print(f"Hearth worker at {host}:{port}; Ctrl-C stops", flush=True)
        serve_worker(host, port, device=device, threads=threads, cache_dir=cache_dir)
    # llama.cpp's server returns only when it could not listen (the port taken, an address it cannot read)
    raise HearthError(f"the worker could not listen on {host}:{port} (is the port taken? llama.cpp's worker "
                      "reads IPv4 addresses and names only)")


def exit_at_eof() -> None:
    """Whoever started this process (an SSH session, the window) let go of its standard input: exit."""
    while sys.stdin.buffer.read(4096):
        pass
    os._exit(0)

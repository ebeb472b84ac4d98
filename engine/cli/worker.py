"""``python -m engine worker``: this machine's device as one more device for a Hearth elsewhere (llama.cpp RPC).

The RPC port has no key and no encryption, and a crafted request can crash or
subvert the worker (llama.cpp #25288, #25289, #26825, #26912). So it binds
127.0.0.1 unless ``--unsafe-listen`` says otherwise, and the way to use it from
another machine is an SSH tunnel, which Hearth's "Add a machine" (user@host)
opens: SSH's keys authenticate and encrypt the link, and the port never leaves
the worker's loopback.
"""
from __future__ import annotations

import sys

from ..backends.llama.rpc import DEFAULT_PORT, serve_worker
from ..errors import HearthError

WARNING = ("WARNING: this worker listens on {host}, beyond this machine. Its port has no key and no encryption, "
           "and a crafted request can crash or take over this process. Never expose it to a network you do not "
           "control; prefer an SSH tunnel (Hearth's Add a machine: user@host).")


def run_worker(host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, device: str | None = None, threads: int = 0,
           cache: bool = True, unsafe_listen: bool = False) -> int:
    """Serve until killed (the RPC server never returns)."""
    if host not in ("127.0.0.1", "localhost", "::1") and not unsafe_listen:
        raise HearthError(f"a worker binds 127.0.0.1 unless --unsafe-listen is given (asked for {host}); to use "
                          "it from another machine, reach it through SSH instead")
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(WARNING.format(host=host), file=sys.stderr, flush=True)
    cache_dir = None
    if cache:
        from ..paths import data_dir

        folder = data_dir() / "rpc-cache"  # tensors over 10 MiB by hash: a second load skips the network
        folder.mkdir(parents=True, exist_ok=True)
        cache_dir = str(folder)
    print(f"Hearth worker at {host}:{port}; Ctrl-C stops", flush=True)
    serve_worker(host, port, device=device, threads=threads, cache_dir=cache_dir)
    return 0

"""A server other devices use: the address, TLS and the keys, the same for ``engine serve --listen`` and the window.

Off loopback the server answers only over TLS (a certificate Hearth makes once in
the data folder, or the user's own) and only to a key of the key ring (``engine
keys``, Settings → Local server) or the settings' key, each key with its own
request budget.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import HearthError
from .keys import KeyRing
from .tls import own_certificate, user_certificate

LISTEN_RATE_LIMIT = 120  # requests a minute per key for a server other devices use


def key_ring(data_dir: Path) -> KeyRing:
    """The server's key ring in the data folder (shared by the window and ``engine keys``)."""
    return KeyRing(Path(data_dir) / "server" / "keys.json")


def exposure(data_dir: Path, listen: str | None, tls_cert: str | None = None, tls_key: str | None = None,
             rate_limit: int | None = None) -> dict[str, Any]:
    """LocalServer's keywords for ``listen``: the address, TLS, the key ring and the rate limit
    (none of them without ``listen``: the server stays on 127.0.0.1, its key ring still honoured)."""
    keys = key_ring(data_dir)
    if not listen:
        if tls_cert or tls_key:
            raise HearthError("--tls-cert and --tls-key go with --listen")
        return {"keys": keys, "rate_limit": rate_limit or 0}
    if bool(tls_cert) != bool(tls_key):
        raise HearthError("--tls-cert and --tls-key go together")
    tls = user_certificate(tls_cert, tls_key) if tls_cert and tls_key else own_certificate(
        Path(data_dir) / "server" / "tls", listen)
    return {"host": listen, "listen": True, "tls": tls, "keys": keys,
            "rate_limit": LISTEN_RATE_LIMIT if rate_limit is None else rate_limit}

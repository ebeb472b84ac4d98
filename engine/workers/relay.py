"""The only way a worker answers beyond loopback: a relay that lets listed client addresses through.

llama.cpp's RPC server has no authentication. ``engine worker --unsafe-listen --allow ADDR`` runs it on
127.0.0.1 as always and puts this relay on the network address: a connection from an address not on
the list is closed before a byte of it reaches the RPC server. It is an address check, not a key: it
keeps out the rest of the network, not someone who can use (or spoof) an allowed address on it.
"""
from __future__ import annotations

import ipaddress
import socket
import sys
import threading
from typing import Iterable

from ..errors import HearthError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def allow_list(entries: Iterable[str]) -> list[Network]:
    """``10.0.0.5``, ``192.168.1.0/24`` or ``fe80::1`` as networks; HearthError for anything else."""
    out = []
    for e in entries:
        try:
            out.append(ipaddress.ip_network(e.strip(), strict=False))
        except ValueError:
            raise HearthError(f"--allow takes an IP address or a network (10.0.0.5, 192.168.1.0/24), "
                              f"not {e!r}") from None
    return out


def allowed(address: str, networks: list[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in n for n in networks if n.version == ip.version)


class Relay:
    """Listens on ``host:port``; passes the allowed clients' bytes to and from ``target`` (host, port)."""

    def __init__(self, host: str, port: int, target: tuple[str, int], networks: list[Network]) -> None:
        if not networks:
            raise HearthError("a worker beyond loopback needs --allow: the client addresses it may answer")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, port), family=family, reuse_port=False)
        self.address = self.sock.getsockname()[:2]
        self.target, self.networks = target, networks
        self.refused = 0   # a count, and the first few and every 100th said: a flood fills neither memory nor log

    def serve_forever(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return  # closed
            if not allowed(peer[0], self.networks):
                self.refused += 1
                conn.close()
                if self.refused <= 5 or self.refused % 100 == 0:
                    print(f"refused a connection from {peer[0]}: not on the worker's --allow list "
                          f"({self.refused} refused so far)", file=sys.stderr, flush=True)
                continue
            threading.Thread(target=self._pass, args=(conn,), daemon=True).start()

    def start(self) -> "Relay":
        threading.Thread(target=self.serve_forever, daemon=True, name="hearth-worker-relay").start()
        return self

    def close(self) -> None:
        self.sock.close()

    def _pass(self, conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        for s in (conn, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # RPC commands are small and latency-bound
        t = threading.Thread(target=_copy, args=(upstream, conn), daemon=True)
        t.start()
        _copy(conn, upstream)
        t.join()


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

"""A small TCP proxy for the remote engine's fault tests: it passes a real server's replies through,
or cuts, stalls or corrupts them, or answers for the server with a status of its own.

Modes (``FaultProxy.mode``, changeable between requests):
- ``pass``: every byte both ways;
- ``cut``: the reply's head and ``after`` bytes of its body, then the connection is closed;
- ``stall``: the same, then nothing more while the connection stays open;
- ``corrupt``: the reply's head, then a line that is not server-sent events, then the rest;
- ``garbage_json``: the reply's head, then an event whose data is not JSON;
- ``status``: no server; ``response`` (raw HTTP bytes) is sent and the connection closed;
- ``silent``: the connection is accepted and never answered.
"""
from __future__ import annotations

import socket
import threading


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], mode: str = "pass", after: int = 0) -> None:
        self.upstream, self.mode, self.after = upstream, mode, after
        self.response = b""
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(client)
            threading.Thread(target=self._serve, args=(client, self.mode, self.after), daemon=True).start()

    def _serve(self, client: socket.socket, mode: str, after: int) -> None:
        if mode == "silent":
            self._stop.wait()
            return
        if mode == "status":
            _read_request(client)
            client.sendall(self.response)
            client.close()
            return
        up = socket.create_connection(self.upstream)
        self._conns.append(up)
        # The request names the proxy as its Host; the server answers only to its own (a DNS-rebinding guard).
        host = (b"Host: 127.0.0.1:%d" % self.port, b"Host: 127.0.0.1:%d" % self.upstream[1])
        threading.Thread(target=_pipe, args=(client, up, host), daemon=True).start()
        head, in_body, body_seen, injected = b"", False, 0, False
        try:
            while True:
                data = up.recv(65536)
                if not data:
                    client.close()
                    return
                if mode == "pass":
                    client.sendall(data)
                    continue
                if not in_body:
                    head += data
                    if b"\r\n\r\n" not in head:
                        continue
                    head, _, data = head.partition(b"\r\n\r\n")
                    client.sendall(head + b"\r\n\r\n")
                    in_body = True
                if mode in ("corrupt", "garbage_json") and not injected:
                    # a whole chunk of the chunked body, so only the SSE inside is wrong
                    line = b"this is not an event\n\n" if mode == "corrupt" else b"data: {not json\n\n"
                    client.sendall(b"%x\r\n%s\r\n" % (len(line), line))
                    injected = True
                if mode in ("cut", "stall") and body_seen + len(data) >= after:
                    client.sendall(data[:max(0, after - body_seen)])
                    if mode == "cut":
                        client.shutdown(socket.SHUT_RDWR)
                        client.close()
                        up.close()
                    else:
                        self._stop.wait()
                    return
                body_seen += len(data)
                client.sendall(data)
        except OSError:
            return


def _read_request(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _pipe(src: socket.socket, dst: socket.socket, host: tuple[bytes, bytes]) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data.replace(*host, 1))
    except OSError:
        pass

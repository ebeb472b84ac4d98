"""HTTP/1.1 to a remote server on the standard library, with a Stop and time-outs that always work.

Why not urllib, requests or httpx: a reply must end within 300 ms of Stop even
while the server sends nothing (a stalled stream, a long prompt being read, a
host that never answers a connect), and a Hearth on the network has a
certificate it made itself, which is checked against the fingerprint first seen
(pins.py), not against a CA. So every wait here is a short slice that looks at
the cancel flag and the deadline between slices, and TLS comes from ``ssl`` with
the peer's certificate in hand.

One connection per request (``Connection: close``): a chat request is one long
stream, and a fresh connection is what a dropped one needs anyway.
"""
from __future__ import annotations

import errno
import hashlib
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Mapping
from urllib.parse import urlsplit

from ..errors import HearthError
from .errors import CertificateChanged, RemoteError, Stopped, fingerprint_text, lost

SLICE_S = 0.05            # the longest a read or connect waits before looking at Stop again
CONNECT_TIMEOUT_S = 10.0  # to connect and finish the TLS handshake
READ_TIMEOUT_S = 300.0    # the longest silence while a reply streams (a long prompt on a slow server)
MAX_HEADER_BYTES = 64 << 10
MAX_LINE_BYTES = 8 << 20  # one SSE line: a chunk is small; a whole non-streamed reply fits


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a server's API is: ``https://host:port/v1`` as scheme, host, port and path prefix."""
    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """A server URL as a user types it: ``host:port``, ``http://host:port`` or ``.../v1``
        (no path means ``/v1``, where every OpenAI-compatible server answers)."""
        text = (url or "").strip()
        if not text:
            raise HearthError("a server URL is needed, such as http://192.168.1.20:8765/v1")
        if "://" not in text:
            text = "http://" + text
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https"):
            raise HearthError(f"a server URL starts with http:// or https://, not {parts.scheme}://")
        if not parts.hostname:
            raise HearthError(f"{url!r} names no host")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise HearthError(f"{url!r} has a port that is not a number from 1 to 65535") from None
        if parts.query or parts.fragment or parts.username:
            raise HearthError(f"{url!r}: give the server's address only (a key goes in the key field)")
        prefix = parts.path.rstrip("/") or "/v1"
        return cls(parts.scheme, parts.hostname, port, prefix)

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}{self.prefix}"

    @property
    def tls(self) -> bool:
        return self.scheme == "https"


class Pins:
    """What the client knows of certificates: the fingerprint pinned for an address, and the
    pinning of a new one (pins.PinStore is the one on disk)."""

    def get(self, address: str) -> str | None:  # pragma: no cover - an interface
        raise NotImplementedError

    def pin(self, address: str, fingerprint: str) -> None:  # pragma: no cover - an interface
        raise NotImplementedError


def _wait(sock: socket.socket, *, write: bool, cancel: threading.Event | None, deadline: float,
          what: str) -> None:
    """Wait until ``sock`` can be read (or written), in slices that look at Stop."""
    while True:
        if cancel is not None and cancel.is_set():
            raise Stopped()
        left = deadline - time.monotonic()
        if left <= 0:
            raise RemoteError(what, "timeout")
        r, w, _ = select.select([] if write else [sock], [sock] if write else [], [], min(SLICE_S, left))
        if r or w:
            return


def _connect_tcp(ep: Endpoint, cancel: threading.Event | None, deadline: float) -> socket.socket:
    try:
        infos = socket.getaddrinfo(ep.host, ep.port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise RemoteError(f"cannot find the host {ep.host!r} ({e.strerror})", "refused") from None
    last: RemoteError | None = None
    for family, kind, proto, _name, addr in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            err = sock.connect_ex(addr)
            if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
                raise OSError(err, errno.errorcode.get(err, str(err)))
            _wait(sock, write=True, cancel=cancel, deadline=deadline,
                  what=f"{ep.address} did not answer within {CONNECT_TIMEOUT_S:.0f} s (connect timed out)")
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, errno.errorcode.get(err, str(err)))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as e:
            sock.close()
            word = "refused the connection" if e.errno == errno.ECONNREFUSED else f"cannot be reached ({e.strerror})"
            last = RemoteError(f"{ep.address} {word}: is the server running there?", "refused")
        except BaseException:
            sock.close()
            raise
    assert last is not None  # getaddrinfo returns at least one address or raises
    raise last


def _handshake(sock: socket.socket, ctx: ssl.SSLContext, ep: Endpoint, cancel: threading.Event | None,
               deadline: float) -> ssl.SSLSocket:
    tls = ctx.wrap_socket(sock, server_hostname=ep.host, do_handshake_on_connect=False)
    while True:
        try:
            tls.do_handshake()
            return tls
        except ssl.SSLWantReadError:
            _wait(tls, write=False, cancel=cancel, deadline=deadline, what=f"{ep.address}: the TLS handshake timed out")
        except ssl.SSLWantWriteError:
            _wait(tls, write=True, cancel=cancel, deadline=deadline, what=f"{ep.address}: the TLS handshake timed out")


def connect(ep: Endpoint, *, pins: Pins | None, cancel: threading.Event | None = None,
            timeout: float = CONNECT_TIMEOUT_S) -> socket.socket:
    """A connected socket (TLS-wrapped for https). A certificate a CA vouches for is accepted as
    browsers do; any other is accepted by its fingerprint: pinned on first use, refused when it
    changes (CertificateChanged shows both)."""
    deadline = time.monotonic() + timeout
    sock = _connect_tcp(ep, cancel, deadline)
    if not ep.tls:
        return sock
    try:
        return _handshake(sock, ssl.create_default_context(), ep, cancel, deadline)
    except ssl.SSLCertVerificationError:
        sock.close()
    except ssl.SSLError as e:
        sock.close()
        raise RemoteError(f"{ep.address}: TLS failed ({e.reason or e}); is it an https server?", "tls") from None
    except OSError as e:
        sock.close()
        raise RemoteError(f"{ep.address} closed the connection during the TLS handshake ({e})", "tls") from None
    # Not CA-signed (a Hearth's own certificate): trust on first use, by fingerprint.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        tls = _handshake(_connect_tcp(ep, cancel, deadline), ctx, ep, cancel, deadline)
    except (ssl.SSLError, OSError) as e:
        raise RemoteError(f"{ep.address}: TLS failed ({e})", "tls") from None
    der = tls.getpeercert(binary_form=True) or b""
    seen = hashlib.sha256(der).hexdigest()
    if pins is None:
        tls.close()
        raise RemoteError(f"{ep.address}'s certificate is not signed by a known authority, and this client "
                          f"keeps no pins to trust it by (its fingerprint: {fingerprint_text(seen)})", "tls")
    pinned = pins.get(ep.address)
    if pinned is None:
        pins.pin(ep.address, seen)
    elif pinned != seen:
        tls.close()
        raise CertificateChanged(ep.address, pinned, seen)
    return tls


class Reader:
    """Buffered reads from a socket, in slices that look at Stop and the silence deadline."""

    def __init__(self, sock: socket.socket, cancel: threading.Event | None, idle_timeout: float, where: str) -> None:
        self.sock, self.cancel, self.idle_timeout, self.where = sock, cancel, idle_timeout, where
        self.buf = bytearray()
        self.eof = False
        sock.setblocking(False)

    def _recv(self) -> bytes:
        deadline = time.monotonic() + self.idle_timeout
        while True:
            if not (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):  # TLS may hold bytes already
                _wait(self.sock, write=False, cancel=self.cancel, deadline=deadline,
                      what=f"{self.where} sent nothing for {self.idle_timeout:.0f} s (timed out)")
            try:
                return self.sock.recv(1 << 16)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                continue
            except (ssl.SSLError, OSError) as e:
                raise lost(self.where, str(e)) from None

    def fill(self) -> bool:
        """Read more into the buffer; False at the end of the stream."""
        if self.eof:
            return False
        data = self._recv()
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def line(self, limit: int = MAX_LINE_BYTES) -> bytes | None:
        """The next line without its end (\\n or \\r\\n); None at the end of the stream (a line cut
        short by the end is a lost connection)."""
        start = 0
        while True:
            i = self.buf.find(b"\n", start)
            if i >= 0:
                out = bytes(self.buf[:i])
                del self.buf[:i + 1]
                return out[:-1] if out.endswith(b"\r") else out
            if len(self.buf) > limit:
                raise RemoteError(f"{self.where} sent a line longer than {limit >> 20} MiB", "malformed")
            start = len(self.buf)
            if not self.fill():
                if not self.buf:
                    return None
                raise lost(self.where)

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self.fill():
                raise lost(self.where)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def some(self) -> bytes:
        """Whatever is buffered, or the next bytes that arrive; b"" at the end of the stream."""
        if not self.buf and not self.fill():
            return b""
        out = bytes(self.buf)
        self.buf.clear()
        return out


@dataclass(slots=True)
class Response:
    status: int
    reason: str
    headers: dict[str, str]
    reader: Reader
    sock: socket.socket

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives, de-chunked; the connection is closed at its end."""
        r = self.reader
        try:
            if "chunked" in self.headers.get("transfer-encoding", "").lower():
                while True:
                    size_line = r.line(1024)
                    if size_line is None:
                        raise lost(r.where)
                    try:
                        size = int(size_line.split(b";")[0].strip() or b"x", 16)
                    except ValueError:
                        raise RemoteError(f"{r.where} sent a malformed chunk size {size_line[:40]!r}",
                                          "malformed") from None
                    if size == 0:
                        return
                    yield r.exactly(size)
                    r.exactly(2)  # the chunk's CRLF
            elif "content-length" in self.headers:
                left = int(self.headers["content-length"])
                while left > 0:
                    data = r.some()
                    if not data:
                        raise lost(r.where)
                    r.buf[:0] = data[left:]
                    data = data[:left]
                    left -= len(data)
                    yield data
            else:
                while data := r.some():
                    yield data
        finally:
            self.close()

    def read(self, limit: int = 16 << 20) -> bytes:
        out = bytearray()
        for data in self.chunks():
            out += data
            if len(out) > limit:
                self.close()
                raise RemoteError(f"{self.reader.where} sent a reply larger than {limit >> 20} MiB", "malformed")
        return bytes(out)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def request(ep: Endpoint, method: str, path: str, *, body: bytes | None = None,
            headers: Mapping[str, str] | None = None, pins: Pins | None = None, cancel: threading.Event | None = None,
            connect_timeout: float = CONNECT_TIMEOUT_S, idle_timeout: float = READ_TIMEOUT_S) -> Response:
    """Send one request and read the response's head; the body is read from the Response."""
    sock = connect(ep, pins=pins, cancel=cancel, timeout=connect_timeout)
    try:
        head = [f"{method} {ep.prefix}{path} HTTP/1.1", f"Host: {ep.address}", "Connection: close",
                "User-Agent: Hearth", "Accept-Encoding: identity"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body is not None:
            head.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        _send_all(sock, data, cancel, time.monotonic() + max(connect_timeout, len(data) / 1e6), ep)
        reader = Reader(sock, cancel, idle_timeout, ep.address)
        status_line = reader.line(MAX_HEADER_BYTES)
        if status_line is None:
            raise RemoteError(f"{ep.address} closed the connection without answering", "lost")
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise RemoteError(f"{ep.address} did not answer in HTTP ({status_line[:60]!r}); "
                              + ("is it an https server?" if not ep.tls else "is the port right?"), "malformed")
        headers_in: dict[str, str] = {}
        size = 0
        while True:
            line = reader.line(MAX_HEADER_BYTES)
            if line is None:
                raise RemoteError(f"{ep.address} closed the connection in the middle of its headers", "lost")
            if not line:
                break
            size += len(line)
            if size > MAX_HEADER_BYTES:
                raise RemoteError(f"{ep.address} sent more than 64 KiB of headers", "malformed")
            k, _, v = line.decode("latin-1").partition(":")
            headers_in[k.strip().lower()] = v.strip()
        return Response(int(parts[1]), parts[2] if len(parts) > 2 else "", headers_in, reader, sock)
    except BaseException:
        sock.close()
        raise


def _send_all(sock: socket.socket, data: bytes, cancel: threading.Event | None, deadline: float,
              ep: Endpoint) -> None:
    view = memoryview(data)
    sock.setblocking(False)
    while view:
        try:
            n = sock.send(view)
            view = view[n:]
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
            _wait(sock, write=True, cancel=cancel, deadline=deadline, what=f"{ep.address} stopped taking the request")
        except (ssl.SSLError, OSError) as e:
            raise RemoteError(f"{ep.address} broke the connection while the request was sent ({e})", "lost") from None

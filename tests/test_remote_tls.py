"""Hearth serving other devices: off loopback, a key on every request, TLS only, and a pinned certificate.

The server listens on 127.0.0.2 (the loopback range, so nothing leaves this
machine) exactly as it would on a LAN address: the same checks apply to any
address but 127.0.0.1.
"""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from engine import HearthError, Message, SamplingParams
from engine.remote.connect import open_remote
from engine.remote.pins import PinStore
from engine.remote.errors import CertificateChanged, RemoteError, fingerprint_text
from engine.serve.http.keys import KeyRing, RateLimit
from engine.serve.http.server import LocalServer
from engine.serve.http.tls import own_certificate
from engine.serve.runtime.scheduler import Scheduler

ADDR = "127.0.0.2"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def exposed(engine, tmp_path_factory):
    """A server on 127.0.0.2 with its own certificate and one key: (server, key, ring, tls files)."""
    folder = tmp_path_factory.mktemp("server")
    ring = KeyRing(folder / "keys.json")
    _entry, key = ring.create("laptop")
    tls = own_certificate(folder / "tls", ADDR)
    sched = Scheduler(engine)
    srv = LocalServer(port=0, host=ADDR, listen=True, tls=tls, keys=ring, rate_limit=1000)
    srv.attach(sched)
    srv.start()
    yield srv, key, ring, tls
    srv.stop()
    sched.close()


def test_a_keyed_client_gets_a_reply_over_tls_and_pins_the_certificate(exposed, tmp_path):
    srv, key, _ring, tls = exposed
    assert srv.url.startswith(f"https://{ADDR}:")
    pins = PinStore(tmp_path / "pins.json")
    eng = open_remote(srv.url, key, pins=pins)
    final = list(eng.stream([Message("user", "Say hi.")], SamplingParams(temperature=0.0, max_tokens=6)))[-1]
    assert final.kind == "final" and final.text
    assert pins.get(f"{ADDR}:{srv.port}") == tls.fingerprint()
    assert stat.S_IMODE(os.stat(pins.path).st_mode) == 0o600


def test_without_a_valid_key_it_is_401_and_a_revoked_key_stops_at_once(exposed, tmp_path):
    srv, key, ring, _tls = exposed
    for given in (None, "hearth-not-a-key"):
        with pytest.raises(RemoteError) as e:
            open_remote(srv.url, given, pins=PinStore(tmp_path / "pins.json"))
        assert e.value.kind == "auth" and e.value.status == 401
    entry, other = ring.create("phone")
    open_remote(srv.url, other, pins=PinStore(tmp_path / "pins.json"))
    ring.revoke(entry.id)
    with pytest.raises(RemoteError) as e:
        open_remote(srv.url, other, pins=PinStore(tmp_path / "pins.json"))
    assert e.value.status == 401


def test_plain_http_gets_no_answer(exposed):
    srv, key, _ring, _tls = exposed
    with socket.create_connection((ADDR, srv.port), timeout=5) as s:
        s.sendall(f"GET /v1/models HTTP/1.1\r\nHost: {ADDR}\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        got = b""
        try:
            while chunk := s.recv(4096):
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert b'"data"' not in got and not got.startswith(b"HTTP/1.1 200")


def test_a_changed_certificate_is_refused_showing_both_fingerprints(exposed, tmp_path):
    srv, key, _ring, tls = exposed
    pins = PinStore(tmp_path / "pins.json")
    old = own_certificate(tmp_path / "before", ADDR).fingerprint()  # the certificate it had before
    pins.pin(f"{ADDR}:{srv.port}", old)
    with pytest.raises(CertificateChanged) as e:
        open_remote(srv.url, key, pins=pins)
    assert fingerprint_text(old) in str(e.value) and fingerprint_text(tls.fingerprint()) in str(e.value)
    assert pins.get(f"{ADDR}:{srv.port}") == old  # the pin stays until the user forgets it


def test_a_server_beyond_loopback_will_not_start_without_tls_or_a_key(tmp_path):
    ring = KeyRing(tmp_path / "keys.json")
    tls = own_certificate(tmp_path / "tls", ADDR)
    with pytest.raises(HearthError, match="binds 127.0.0.1 only"):
        LocalServer(port=0, host=ADDR)
    with pytest.raises(HearthError, match="needs TLS"):
        LocalServer(port=0, host=ADDR, listen=True, keys=ring)
    with pytest.raises(HearthError, match="needs an API key"):
        LocalServer(port=0, host=ADDR, listen=True, keys=ring, tls=tls)


def test_keys_are_stored_only_as_hashes_readable_by_the_user_alone(tmp_path):
    ring = KeyRing(tmp_path / "keys.json")
    entry, key = ring.create("laptop")
    text = ring.path.read_text()
    assert key not in text and entry.sha256 in text and key.startswith("hearth-") and len(key) > 40
    assert stat.S_IMODE(os.stat(ring.path).st_mode) == 0o600
    assert ring.match(key) == entry and ring.match(key + "x") is None
    with pytest.raises(HearthError):
        ring.revoke("nope")


def test_each_key_has_its_own_rate_limit():
    limit = RateLimit(2)  # two a minute: one every 30 s once the burst is spent
    assert limit.take("a", now=0) == 0 and limit.take("a", now=0) == 0
    assert limit.take("a", now=0) == 30 and limit.take("b", now=0) == 0
    assert limit.take("a", now=30) == 0


def test_engine_serve_listen_and_engine_chat_remote(tmp_path):
    """The two commands a user runs: a server for other devices, and a terminal chat that uses it."""
    env = {**os.environ, "HEARTH_DATA_DIR": str(tmp_path / "server")}
    key = subprocess.run([sys.executable, "-m", "engine", "keys", "new", "laptop"], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.strip()
    err = open(tmp_path / "serve.err", "w")
    srv = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--listen", ADDR, "--port", "0", "--no-library",
                            "--ctx", "2048"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = srv.stdout.readline()
        assert "Hearth serving" in line and "API key required" in line, (tmp_path / "serve.err").read_text()
        url = line.split(" at ")[1].split(";")[0].split(" ")[0]
        assert url.startswith(f"https://{ADDR}:")
        client_env = {**os.environ, "HEARTH_DATA_DIR": str(tmp_path / "client"), "HEARTH_REMOTE_KEY": key}
        chat = subprocess.run([sys.executable, "-m", "engine", "chat", "--remote", url, "--temp", "0",
                               "--max-tokens", "8"], input="Say hi.\n", env=client_env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert chat.returncode == 0 and chat.stdout.strip(), chat.stderr
        assert "tok/s" in chat.stderr and "remote (hearth)" in chat.stderr
        bad = subprocess.run([sys.executable, "-m", "engine", "chat", "--remote", url, "--key", "wrong"],
                             input="hi\n", env=client_env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and "refused the API key (401)" in bad.stderr
        assert "Traceback" not in bad.stderr
    finally:
        srv.terminate()
        srv.wait(30)
        err.close()

"""The certificate a Hearth serving other devices makes for itself on first start.

No authority signs it; a Hearth client pins its fingerprint on first use
(engine/remote/pins.py) and refuses a changed one. The key is P-256, readable by
the user only; the certificate names the listen address, this machine's name and
the loopback names, and lasts ten years (a pinned certificate that expires would
only teach people to click through a warning). ``--tls-cert/--tls-key`` take the
user's own instead.
"""
from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from ...atomic import atomic_write
from ...errors import HearthError


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path

    def fingerprint(self) -> str:
        """The SHA-256 of the certificate (DER), as the client pins it."""
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import Encoding

        try:
            cert = x509.load_pem_x509_certificate(self.cert.read_bytes())
        except (OSError, ValueError) as e:
            raise HearthError(f"cannot read the TLS certificate {self.cert}: {e}") from None
        return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()


def _names(listen: str) -> tuple[list[str], list[str]]:
    dns = sorted({"localhost", socket.gethostname()} - {""})
    ips = {"127.0.0.1", "::1"}
    try:
        ip = ipaddress.ip_address(listen)
        if not ip.is_unspecified:
            ips.add(str(ip))
    except ValueError:
        dns.append(listen)
    return dns, sorted(ips)


def own_certificate(folder: Path, listen: str) -> TlsFiles:
    """The certificate in ``folder``, made on first use (again when it does not name ``listen``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    files = TlsFiles(folder / "cert.pem", folder / "key.pem")
    dns, ips = _names(listen)
    if files.cert.exists() and files.key.exists():
        try:
            cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            have = {str(v) for v in san.get_values_for_type(x509.IPAddress)}
            have |= set(san.get_values_for_type(x509.DNSName))
            if set(ips) | set(dns) <= have:
                return files
        except (OSError, ValueError, x509.ExtensionNotFound):
            pass  # unreadable or naming other addresses: made again below
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Hearth on {socket.gethostname() or 'this machine'}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    san = x509.SubjectAlternativeName([x509.DNSName(d) for d in dns] +
                                      [x509.IPAddress(ipaddress.ip_address(i)) for i in ips])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650)).add_extension(san, critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    atomic_write(files.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    os.chmod(files.key, 0o600)
    atomic_write(files.cert, cert.public_bytes(serialization.Encoding.PEM))
    return files


def user_certificate(cert: str, key: str) -> TlsFiles:
    """The user's own certificate and key, checked to exist and to be a pair uvicorn can load."""
    import ssl

    files = TlsFiles(Path(cert).expanduser(), Path(key).expanduser())
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as e:
        raise HearthError(f"cannot use the TLS certificate {files.cert} with the key {files.key}: {e}") from None
    return files

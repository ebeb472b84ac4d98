"""What can go wrong with a remote server, in one line each: the errors the window and the tests read."""
from __future__ import annotations

from ..errors import HearthError


class RemoteError(HearthError):
    """A remote server could not be used; ``kind`` says why in one word (refused, timeout, tls,
    certificate_changed, auth, not_found, rate_limited, unavailable, http, malformed, lost, cancelled),
    ``retry_after`` the seconds a 429 or 503 asked to wait."""

    def __init__(self, message: str, kind: str, *, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind, self.status, self.retry_after = kind, status, retry_after


class CertificateChanged(RemoteError):
    """The server's certificate is not the one pinned for its address on first use."""

    def __init__(self, address: str, pinned: str, seen: str) -> None:
        super().__init__(
            f"{address}'s TLS certificate has changed: pinned {fingerprint_text(pinned)}, now "
            f"{fingerprint_text(seen)}. Someone may be intercepting the connection; if the server made a new "
            "certificate, forget the connection and add it again", "certificate_changed")
        self.address, self.pinned, self.seen = address, pinned, seen


class Stopped(RemoteError):
    """Stop was pressed while waiting on the server."""

    def __init__(self) -> None:
        super().__init__("stopped", "cancelled")


def fingerprint_text(hexdigest: str) -> str:
    """A SHA-256 fingerprint as SSH and browsers show one: ``SHA256:ab:cd:...``."""
    return "SHA256:" + ":".join(hexdigest[i:i + 2] for i in range(0, len(hexdigest), 2))


def lost(where: str, why: str = "") -> RemoteError:
    """The connection dropped while a reply was coming: the one wording every such fault gets."""
    return RemoteError(f"the connection to {where} was lost in the middle of the reply" + (f" ({why})" if why else ""),
                       "lost")

"""Images in API requests: OpenAI ``image_url`` parts carrying ``data:`` URLs, checked before decoding.

The server fetches nothing from the network: an ``http(s)`` URL is a 400 that says so.
The base64 text is measured before it is decoded, the image's header before its pixels
(engine/images.py), and the part becomes an ``ImagePart`` keyed by its SHA-256.
"""
from __future__ import annotations

import base64
import binascii
import re

from ...inputs.images import MAX_BYTES, ImageError, decode
from ...prompt.messages import ImagePart
from .errors import bad

_DATA_URL = re.compile(r"data:(image/[a-z0-9.+-]+)?(;[a-z0-9=.+-]+)*?;base64,", re.I)


def image_part(url: object, where: str) -> ImagePart:
    """The image an ``image_url.url`` names; ApiError (400) for anything but a readable data: URL."""
    if not isinstance(url, str) or not url:
        raise bad(where, f"{where} must be a data: URL (data:image/png;base64,...)")
    head = url[:300].lower()
    if head.startswith(("http://", "https://", "file:", "ftp:")):
        raise bad(where, f"{where}: this server fetches nothing from the network or disk; send the image "
                         "inline as a data: URL (data:image/png;base64,...)")
    m = _DATA_URL.match(url)
    if m is None:
        raise bad(where, f"{where} must be a base64 data: URL of an image (data:image/png;base64,...)")
    payload = url[m.end():]
    if len(payload) * 3 // 4 > MAX_BYTES:
        raise bad(where, f"{where}: the image is over {MAX_BYTES // 2**20} MiB", code="image_too_large")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise bad(where, f"{where}: the data: URL is not valid base64") from None
    try:
        img = decode(data, "the image")  # whole: a truncated file is this part's 400, not a failed reply
    except ImageError as e:
        raise bad(where, f"{where}: {e}", code="invalid_image") from None
    return ImagePart(img.sha256, img.mime, data)


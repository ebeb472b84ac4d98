"""Images a user attached or a client sent: checked before they are decoded, then decoded once.

An image is untrusted input. Its bytes and pixel count are checked from the
header before a single pixel is decoded (a 20,000 x 20,000 PNG or a
decompression bomb is refused, never inflated), only PNG, JPEG, WebP and GIF
(its first frame) are accepted, and a corrupt or truncated file gets one clear
line. The decoded RGB pixels are what the vision model's projector reads.
"""
from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass
from typing import Any

from ..errors import HearthError

MAX_BYTES = 20 * 2**20          # an attachment or a data: URL
MAX_PIXELS = 40_000_000         # 40 MP: larger than any phone photo, far below a bomb
MAX_SIDE = 16_384
FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}


class ImageError(HearthError):
    """An image that cannot be used: corrupt, truncated, too large, or of a format Hearth does not read."""


@dataclass(slots=True, frozen=True)
class DecodedImage:
    sha256: str       # of the file's bytes: the image's identity in the store and the prefix cache
    mime: str
    width: int
    height: int
    rgb: bytes = b""  # width x height x 3, row-major


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _open(data: bytes, label: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise ImageError(f"{label} is empty")
    if len(data) > MAX_BYTES:
        raise ImageError(f"{label} is {len(data) / 2**20:.1f} MiB; images up to {MAX_BYTES // 2**20} MiB are read")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data), formats=list(FORMATS))
    except UnidentifiedImageError:
        raise ImageError(f"{label} is not an image Hearth reads (PNG, JPEG, WebP or GIF), or it is corrupt") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageError(f"{label} is too large to decode safely ({e}); nothing was decoded") from None
    except (OSError, ValueError, SyntaxError) as e:
        raise ImageError(f"{label} is corrupt: {e}") from None
    w, h = img.size
    if w <= 0 or h <= 0 or w > MAX_SIDE or h > MAX_SIDE or w * h > MAX_PIXELS:
        raise ImageError(f"{label} is {w} x {h} pixels; images up to {MAX_SIDE} pixels a side and "
                         f"{MAX_PIXELS // 1_000_000} megapixels are read (nothing was decoded)")
    return img


def probe_image(data: bytes, label: str = "the image") -> DecodedImage:
    """The image's kind and size from its header, checked against the limits; no pixel is decoded."""
    img = _open(data, label)
    return DecodedImage(sha256_of(data), FORMATS[str(img.format)], img.size[0], img.size[1])


def decode(data: bytes, label: str = "the image") -> DecodedImage:
    """The image's RGB pixels (a GIF's first frame; transparency over white), after ``probe``'s checks."""
    from PIL import Image

    img = _open(data, label)
    try:
        img.seek(0)
        img.load()
        if img.mode in ("RGBA", "LA", "P", "PA") or "transparency" in img.info:
            rgba = img.convert("RGBA")
            flat = Image.new("RGB", rgba.size, (255, 255, 255))
            flat.paste(rgba, mask=rgba.getchannel("A"))
            rgb = flat
        else:
            rgb = img.convert("RGB")
        pixels = rgb.tobytes()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise ImageError(f"{label} is corrupt or truncated: {e}") from None
    return DecodedImage(sha256_of(data), FORMATS[str(img.format)], rgb.size[0], rgb.size[1], pixels)

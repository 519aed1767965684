"""Decoding an image with Pillow, whatever its declared type says: it must really be PNG, JPEG,
WebP or GIF; one claiming more pixels than `MAX_SOURCE_PIXELS` is refused before it is decoded
(a decompression bomb); an animation gives its first frame; anything over about one megapixel is
scaled down, keeping its aspect. The result is a PNG: what the runtime receives."""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass

from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from server.errors import InvalidRequest

FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
MAX_SOURCE_PIXELS = 50_000_000  # refused before decoding
MAX_PIXELS = 1024 * 1024  # about one megapixel after scaling
TOKENS_PER_IMAGE = 1024  # what admission and count_tokens count for an image


@dataclass(frozen=True, slots=True)
class DecodedImage:
    png: bytes
    width: int
    height: int
    source_format: str  # image/png, image/jpeg, image/webp or image/gif, from the bytes


def decode(data: bytes, where: str) -> DecodedImage:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            image = PILImage.open(io.BytesIO(data), formats=list(FORMATS))
            source = FORMATS[str(image.format)]
            width, height = image.size
            if width * height > MAX_SOURCE_PIXELS:
                raise InvalidRequest(
                    f"{where}: the image is {width}x{height}, more than {MAX_SOURCE_PIXELS} pixels",
                    param=where,
                )
            image.seek(0)  # an animation's first frame
            image.load()
            frame = image.convert("RGBA" if _has_alpha(image) else "RGB")
    except InvalidRequest:
        raise
    except (UnidentifiedImageError, KeyError):
        raise InvalidRequest(f"{where}: not a PNG, JPEG, WebP or GIF image", param=where) from None
    except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning):
        raise InvalidRequest(f"{where}: the image is too large to decode", param=where) from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise InvalidRequest(
            f"{where}: the image data is damaged ({type(exc).__name__})", param=where
        ) from None
    if width * height > MAX_PIXELS:
        scale = math.sqrt(MAX_PIXELS / (width * height))
        size = (max(1, int(width * scale)), max(1, int(height * scale)))
        frame = frame.resize(size, PILImage.Resampling.LANCZOS)
    out = io.BytesIO()
    frame.save(out, format="PNG")
    return DecodedImage(out.getvalue(), frame.width, frame.height, source)


def _has_alpha(image: PILImage.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info

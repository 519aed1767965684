"""Image decoding with Pillow: the real format whatever the declaration, bombs refused before
decoding, an animation's first frame, scaling to about one megapixel."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image

from server.errors import InvalidRequest
from server.images.decode import MAX_PIXELS, decode

WHERE = "messages.0.content.1"


def encoded(image: Image.Image, format: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=format, **options)
    return out.getvalue()


@pytest.mark.parametrize(
    ("format", "media_type"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp"), ("GIF", "image/gif")],
)
def test_each_format_decodes_to_png(format: str, media_type: str) -> None:
    decoded = decode(encoded(Image.new("RGB", (40, 30), "red"), format), WHERE)
    assert decoded.source_format == media_type
    assert (decoded.width, decoded.height) == (40, 30)
    assert Image.open(io.BytesIO(decoded.png)).format == "PNG"


@pytest.mark.parametrize(
    "data",
    [
        b"this is text, declared as image/png",
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 40,  # a PNG signature and nothing sound after it
        encoded(Image.new("RGB", (8, 8)), "BMP"),  # a real image, of a format not taken
        encoded(Image.new("RGB", (8, 8)), "TIFF"),
    ],
)
def test_fakes_and_other_formats_are_refused(data: bytes) -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode(data, WHERE)
    assert refused.value.param == WHERE


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims width x height pixels: a decompression bomb's header."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = zlib.compress(b"\x00" * 1024)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("width", "height", "message"),
    [(8000, 8000, "8000x8000, more than"), (100_000, 100_000, "too large to decode")],
)
def test_a_decompression_bomb_is_refused_before_decoding(
    width: int, height: int, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        decode(png_header_only(width, height), WHERE)


def test_an_animation_gives_its_first_frame() -> None:
    frames = [Image.new("RGB", (20, 20), color) for color in ("red", "green", "blue")]
    data = encoded(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    decoded = decode(data, WHERE)
    assert Image.open(io.BytesIO(decoded.png)).convert("RGB").getpixel((5, 5)) == (255, 0, 0)


def test_a_large_image_is_scaled_to_about_a_megapixel_keeping_its_aspect() -> None:
    decoded = decode(encoded(Image.new("RGB", (4000, 2000), "white"), "JPEG"), WHERE)
    assert decoded.width * decoded.height <= MAX_PIXELS
    assert decoded.width * decoded.height > MAX_PIXELS * 0.98
    assert abs(decoded.width / decoded.height - 2.0) < 0.01


def test_transparency_is_kept() -> None:
    decoded = decode(encoded(Image.new("RGBA", (10, 10), (0, 0, 0, 0)), "PNG"), WHERE)
    assert Image.open(io.BytesIO(decoded.png)).mode == "RGBA"

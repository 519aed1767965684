"""A request's images, ready for the runtime: inline data as sent, URLs fetched through the
egress guard (their bytes charged to the organization's remote image limit), each decoded and
normalized (server.images.decode) in a worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from server.canonical import Image
from server.images.decode import DecodedImage, decode
from server.images.egress import EgressGuard


class ImageLoader:
    def __init__(self, guard: EgressGuard) -> None:
        self.guard = guard

    async def load(
        self, images: Sequence[Image], charge_remote_bytes: Callable[[int], None]
    ) -> tuple[DecodedImage, ...]:
        """In request order; raises the first image's error (400, 403 egress_denied, 429)."""
        decoded = []
        for image in images:
            if image.data is not None:
                data = image.data
            else:
                assert image.url is not None  # the decoders give one or the other
                fetched = await self.guard.fetch(image.url, image.path)
                charge_remote_bytes(len(fetched.data))
                data = fetched.data
            decoded.append(await asyncio.to_thread(decode, data, image.path))
        return tuple(decoded)

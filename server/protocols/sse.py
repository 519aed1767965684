"""Server-sent events framing."""

from __future__ import annotations

from typing import Any

import orjson


def event(data: dict[str, Any], name: str | None = None) -> bytes:
    """One event: `event: NAME` (when given) and one `data:` line of compact JSON."""
    payload = orjson.dumps(data)
    if name is None:
        return b"data: " + payload + b"\n\n"
    return b"event: " + name.encode() + b"\ndata: " + payload + b"\n\n"


DONE = b"data: [DONE]\n\n"

"""Reading server-sent events from a raw httpx stream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx


def events(response: httpx.Response) -> Iterator[tuple[str | None, Any]]:
    """(event name or None, parsed data) as they arrive; `[DONE]` stays a string."""
    name: str | None = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            raw = line.removeprefix("data: ")
            yield name, raw if raw == "[DONE]" else json.loads(raw)
            name = None

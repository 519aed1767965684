"""Helpers for encoder tests: a response context and SSE parsing."""

from __future__ import annotations

import json
import time
from typing import Any

from server.protocols.context import ResponseContext
from server.timing import Timing

REQUEST_ID = "req_01m5t4yg394wegr3j4y01qb363"


def context(prompt_tokens: int = 7) -> ResponseContext:
    timing = Timing(started=time.perf_counter())
    timing.phases.update({"ttft": 12.5, "model": 40.0})
    return ResponseContext(REQUEST_ID, "b3os/test", "n1", prompt_tokens, 1793001600, timing)


def parse_sse(raw: bytes) -> list[tuple[str | None, Any]]:
    """(event name or None, parsed data) per event; `[DONE]` stays a string."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        name, data = None, None
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data = value if value == "[DONE]" else json.loads(value)
        events.append((name, data))
    return events

"""What an encoder needs to know about the response it is writing, besides the events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.timing import Timing


@dataclass(frozen=True, slots=True)
class ResponseContext:
    request_id: str
    model: str
    node: str
    prompt_tokens: int
    created: int  # Unix seconds
    timing: Timing
    logprobs: bool = False  # the request asked for them
    route: str = "local"  # where the answer ran: local, or gateway
    cached_tokens: int = 0  # of prompt_tokens, read from the prefix cache: known at the first token

    def b3os(self, *, streamed: bool) -> dict[str, Any]:
        """The B3OS extension object: where the answer ran and server-side milliseconds from the
        request head (`ttft_ms` on streams, `model_ms` without)."""
        timing: dict[str, Any] = {}
        if streamed:
            timing["ttft_ms"] = self.timing.ms("ttft")
        else:
            timing["model_ms"] = self.timing.ms("model")
        timing["total_ms"] = round(self.timing.since_start(), 3)
        return {"route": self.route, "node": self.node, "timing": timing}

"""One streamed request, timed from the client: time to first token, inter-token gaps, end to
end, output tokens, and the server's own Server-Timing phases."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

PATHS = {"messages": "/v1/infer/v1/messages", "chat": "/v1/infer/chat/completions"}


@dataclass
class Sample:
    ttft_ms: float
    e2e_ms: float
    output_tokens: int
    gaps_ms: list[float] = field(default_factory=list)  # between streamed events after the first
    server: dict[str, float] = field(default_factory=dict)  # Server-Timing phases, and b3os ones

    @property
    def tokens_per_s(self) -> float | None:
        decode_ms = self.e2e_ms - self.ttft_ms
        return (
            (self.output_tokens - 1) / decode_ms * 1000
            if self.output_tokens > 1 and decode_ms > 0
            else None
        )


def server_timing(header: str) -> dict[str, float]:
    phases = {}
    for entry in header.split(","):
        name, _, duration = entry.strip().partition(";dur=")
        if duration:
            phases[name] = float(duration)
    return phases


def stream(client: httpx.Client, protocol: str, body: dict[str, Any]) -> Sample:
    started = time.perf_counter()
    first = last = None
    gaps: list[float] = []
    usage_tokens = 0
    with client.stream("POST", PATHS[protocol], json={**body, "stream": True}) as response:
        response.raise_for_status()
        phases = server_timing(response.headers.get("server-timing", ""))
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter()
            data = orjson.loads(line[6:])
            if _is_token_event(protocol, data):
                if first is None:
                    first = now
                elif last is not None:
                    gaps.append((now - last) * 1000)
                last = now
            usage_tokens = _output_tokens(protocol, data) or usage_tokens
    ended = time.perf_counter()
    ttft = ((first or ended) - started) * 1000
    return Sample(ttft, (ended - started) * 1000, usage_tokens, gaps, phases)


def _is_token_event(protocol: str, data: dict[str, Any]) -> bool:
    if protocol == "messages":
        return bool(data.get("type") == "content_block_delta")
    choices = data.get("choices") or []
    delta = choices[0].get("delta", {}) if choices else {}
    return bool(delta.get("content") or delta.get("tool_calls"))


def _output_tokens(protocol: str, data: dict[str, Any]) -> int | None:
    if protocol == "messages":
        return (
            (data.get("usage") or {}).get("output_tokens")
            if data.get("type") == "message_delta"
            else None
        )
    usage = data.get("usage")
    return usage.get("completion_tokens") if usage else None

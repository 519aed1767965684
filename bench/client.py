"""Streamed requests timed from the client: time to first token, the gaps between streamed
events, end to end, output tokens, and (on this server) its Server-Timing phases and request log
entry. A load runs many at a given concurrency."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bench.target import Target


@dataclass
class Sample:
    ttft_ms: float
    e2e_ms: float
    output_tokens: int
    events: int
    gaps_ms: list[float] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)  # Server-Timing, then b3os.timing
    request_id: str | None = None
    prompt_tokens: int = 0  # as the server's usage says
    cached_tokens: int | None = None  # of them, read from the prefix cache (None: not said)

    @property
    def tokens_per_s(self) -> float | None:
        decode_ms = self.e2e_ms - self.ttft_ms
        if self.output_tokens < 2 or decode_ms <= 0:
            return None
        return (self.output_tokens - 1) / decode_ms * 1000


@dataclass
class Load:
    samples: list[Sample]
    wall_s: float

    @property
    def tokens_per_s(self) -> float:
        return sum(s.output_tokens for s in self.samples) / self.wall_s if self.wall_s else 0.0

    @property
    def events_per_s(self) -> float:
        return sum(s.events for s in self.samples) / self.wall_s if self.wall_s else 0.0


def server_timing(header: str) -> dict[str, float]:
    phases = {}
    for entry in header.split(","):
        name, _, duration = entry.strip().partition(";dur=")
        if duration:
            phases[name] = float(duration)
    return phases


def client(http2: bool = False, connections: int = 100, timeout: float = 600) -> httpx.AsyncClient:
    """HTTP/2 is cleartext with prior knowledge, as the server takes it."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(http1=not http2, http2=http2, timeout=timeout, limits=limits)


async def stream(
    http: httpx.AsyncClient, target: Target, protocol: str, body: dict[str, Any]
) -> Sample:
    started = time.perf_counter()
    first = last = None
    gaps: list[float] = []
    tokens = events = prompt_tokens = 0
    cached: int | None = None
    extension: dict[str, Any] = {}
    async with http.stream("POST", target.url(protocol), json={**body, "stream": True}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{response.status_code}: {(await response.aread())[:300]!r}")
        phases = server_timing(response.headers.get("server-timing", ""))
        request_id = response.headers.get("x-request-id")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter()
            data = orjson.loads(line[6:])
            if _is_token_event(protocol, data):
                events += 1
                if first is None:
                    first = now
                else:
                    gaps.append((now - (last or now)) * 1000)
                last = now
            tokens = _output_tokens(protocol, data) or tokens
            prompt_tokens = _prompt_tokens(data) or prompt_tokens
            cached = _cached_tokens(data) if _usage(data) else cached
            # The Responses API's b3os rides on its last event's response.
            extension = data.get("b3os") or (data.get("response") or {}).get("b3os") or extension
    ended = time.perf_counter()
    for name, value in (extension.get("timing") or {}).items():
        phases[f"b3os.{name}"] = value
    ttft = ((first or ended) - started) * 1000
    e2e = (ended - started) * 1000
    return Sample(ttft, e2e, tokens, events, gaps, phases, request_id, prompt_tokens, cached)


async def load(
    target: Target,
    protocol: str,
    bodies: list[dict[str, Any]],
    concurrency: int,
    http2: bool = False,
) -> Load:
    """All bodies, at most `concurrency` in flight."""
    gate = asyncio.Semaphore(concurrency)
    async with client(http2, connections=concurrency) as http:

        async def one(body: dict[str, Any]) -> Sample:
            async with gate:
                return await stream(http, target, protocol, body)

        started = time.perf_counter()
        samples = await asyncio.gather(*(one(body) for body in bodies))
        return Load(list(samples), time.perf_counter() - started)


RESPONSES_DELTAS = (
    "response.output_text.delta",
    "response.function_call_arguments.delta",
    "response.reasoning_summary_text.delta",
)
RESPONSES_ENDS = ("response.completed", "response.incomplete")


def _is_token_event(protocol: str, data: dict[str, Any]) -> bool:
    if protocol == "messages":
        return bool(data.get("type") == "content_block_delta")
    if protocol == "responses":
        return data.get("type") in RESPONSES_DELTAS
    choices = data.get("choices") or []
    delta = choices[0].get("delta", {}) if choices else {}
    return bool(delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content"))


def _usage(data: dict[str, Any]) -> dict[str, Any] | None:
    """Any protocol's usage: chat's last chunk, message_start and message_delta,
    response.completed."""
    usage = (
        data.get("usage")
        or (data.get("message") or {}).get("usage")
        or (data.get("response") or {}).get("usage")
    )
    return usage or None


def _prompt_tokens(data: dict[str, Any]) -> int | None:
    """The whole prompt: Anthropic counts the tokens read from the cache apart."""
    usage = _usage(data)
    if not usage:
        return None
    value = usage.get("prompt_tokens") or usage.get("input_tokens")
    if value is None:
        return None
    cache = ("cache_read_input_tokens", "cache_creation_input_tokens")
    return int(value) + sum(int(usage.get(name) or 0) for name in cache) or None


def _cached_tokens(data: dict[str, Any]) -> int | None:
    usage = _usage(data) or {}
    if "cache_read_input_tokens" in usage:
        return int(usage["cache_read_input_tokens"] or 0)
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    value = details.get("cached_tokens")
    return None if value is None else int(value)


def _output_tokens(protocol: str, data: dict[str, Any]) -> int | None:
    if protocol == "messages":
        if data.get("type") == "message_delta":
            return int((data.get("usage") or {}).get("output_tokens") or 0)
        return None
    if protocol == "responses":
        if data.get("type") in RESPONSES_ENDS:
            return int(data["response"]["usage"]["output_tokens"])
        return None
    usage = data.get("usage")
    return int(usage.get("completion_tokens") or 0) if usage else None

"""Chat completions for models this node does not serve, answered by the B3IQ gateway
(`route: "gateway"`): the same service the request flow gets for the local model, so admission,
metering, the request log, ids, Server-Timing and the encoders are the ones every answer goes
through. The upstream's chunks become canonical events as they arrive (nothing is buffered), and
its own usage settles the account."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator, Collection
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import orjson

from server.canonical import (
    Event,
    Finish,
    FinishReason,
    GenerateRequest,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from server.engines.base import EngineRequest
from server.errors import BackendUnavailable, UnsupportedParameter
from server.gateway.client import RETRY_AFTER, GatewayClient
from server.gateway.upstream import call_id, chat_body
from server.generation import Prepared, Tracker, accounted
from server.ids import tool_call_id
from server.requestlog import RequestRecord
from server.timing import Timing
from server.tokenizer import Prompt

BYTES_PER_TOKEN = 4  # the prompt's estimate at admission, before the upstream's count
DEFAULT_BUDGET = 512  # tokens held at admission for an answer with no max_tokens
FINISH_REASONS = {
    "stop": FinishReason.END_TURN,
    "length": FinishReason.MAX_TOKENS,
    "tool_calls": FinishReason.TOOL_USE,
    "function_call": FinishReason.TOOL_USE,
    "content_filter": FinishReason.END_TURN,
}


@dataclass(frozen=True, slots=True)
class GatewayPrepared(Prepared):
    """A request ready for the gateway: the body it is sent, and its prompt's estimate."""

    body: dict[str, Any] = field(default_factory=dict)
    estimate: int = 0

    @property
    def estimated_prompt_tokens(self) -> int:
        return self.estimate


class GatewayGeneration:
    route = "gateway"
    fetches_images = False  # the gateway fetches what the client named

    def __init__(self, client: GatewayClient, models: Collection[str] = ()) -> None:
        self.client = client
        self.models = frozenset(models)  # empty: any model may be asked for

    def serves(self, model: str) -> bool:
        return not self.models or model in self.models

    async def close(self) -> None:
        await self.client.close()

    def prepare(self, request: GenerateRequest, request_id: str, timing: Timing) -> Prepared:
        if request.sampling.logprobs:
            raise UnsupportedParameter(
                "logprobs: log probabilities are not carried through the gateway route",
                param="logprobs",
            )
        body = chat_body(request)
        budget = request.sampling.max_tokens or DEFAULT_BUDGET
        sampling = dataclasses.replace(request.sampling, max_tokens=budget)
        estimate = len(orjson.dumps(body["messages"])) // BYTES_PER_TOKEN
        engine_request = EngineRequest(request_id, [], sampling)
        return GatewayPrepared(request, Prompt("", []), engine_request, None, None, body, estimate)

    async def events(
        self, prepared: Prepared, record: RequestRecord, tracker: Tracker
    ) -> AsyncGenerator[Event, None]:
        timing = record.timing
        assert isinstance(prepared, GatewayPrepared)
        sent = time.perf_counter()
        reader = _Reader()
        with accounted(record, tracker):  # a client gone closes the upstream request
            async with aclosing(self.client.chunks(prepared.body)) as chunks:
                async for chunk in chunks:
                    if "ttft" not in timing.phases:
                        timing.mark("ttft")
                        timing.record("gateway", sent)  # the hop and the upstream's first token
                    for event in reader.read(chunk):
                        yield event
                    record.completion_tokens = reader.tokens
                    metered = tracker.output(reader.tokens)
                    if metered is not None:
                        await metered
            if reader.reason is None:  # the upstream's stream ended without a finish
                raise BackendUnavailable(
                    "the gateway's answer ended before it finished; retry in "
                    f"{RETRY_AFTER} seconds",
                    retry_after=RETRY_AFTER,
                )
            timing.record("model", sent)
            for event in reader.close():
                yield event
            finish = reader.finish(prepared.estimated_prompt_tokens)
            record.finished(finish)
            await tracker.settle()
            yield finish


class _Reader:
    """The upstream's chunks -> canonical events: reasoning, text, calls (each opened once and
    closed when the next begins or the answer ends), its finish reason and usage. Each chunk
    that carries output counts as one token until the upstream's usage says."""

    def __init__(self) -> None:
        self.tokens = 0
        self.reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self._thinking = False
        self._calls: dict[int, int] = {}  # the upstream's call index -> ours
        self._open: int | None = None  # our index of the call being written

    def read(self, chunk: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            produced = len(events)
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._thinking = True
                events.append(ThinkingDelta(reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                events += self._end_thinking() + self._end_call()
                events.append(TextDelta(content))
            for call in delta.get("tool_calls") or ():
                events += self._end_thinking() + self._call(call)
            if len(events) > produced:
                self.tokens += 1
            if choice.get("finish_reason"):
                self.reason = str(choice["finish_reason"])
        return events

    def _end_thinking(self) -> list[Event]:
        if not self._thinking:
            return []
        self._thinking = False
        return [ThinkingEnd("")]  # the gateway's reasoning carries no signature of the node's

    def _end_call(self, complete: bool = True) -> list[Event]:
        if self._open is None:
            return []
        index, self._open = self._open, None
        return [ToolCallEnd(index, complete)]

    def _call(self, call: Any) -> list[Event]:
        if not isinstance(call, dict):
            return []
        function = call.get("function") or {}
        upstream = call.get("index", 0)
        events: list[Event] = []
        if upstream not in self._calls:
            events += self._end_call()
            self._calls[upstream] = index = len(self._calls)
            self._open = index
            identifier = call.get("id")
            name = function.get("name") or ""
            ours = call_id(identifier) if isinstance(identifier, str) else tool_call_id()
            events.append(ToolCallStart(index, ours, name))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments and self._open is not None:
            events.append(ToolCallDelta(self._calls[upstream], arguments))
        return events

    def close(self) -> list[Event]:
        """What is still open when the upstream's answer ends."""
        return self._end_thinking() + self._end_call(complete=self.reason != "length")

    def finish(self, estimated_prompt: int) -> Finish:
        reason = FINISH_REASONS.get(self.reason or "stop", FinishReason.END_TURN)
        if reason is FinishReason.END_TURN and self._calls:
            reason = FinishReason.TOOL_USE
        usage = self.usage or {}
        details = usage.get("prompt_tokens_details") or {}
        return Finish(
            reason,
            Usage(
                _count(usage.get("prompt_tokens"), estimated_prompt),
                _count(usage.get("completion_tokens"), self.tokens),
                _count(details.get("cached_tokens") if isinstance(details, dict) else None, 0),
            ),
        )


def _count(value: Any, default: int) -> int:
    return value if isinstance(value, int) and value >= 0 else default

"""Canonical events -> Anthropic Messages: the stream (`message_start` ... `message_stop`), the
folded message body, and the error shape."""

from __future__ import annotations

from typing import Any

import orjson

from server.canonical import (
    Answer,
    Event,
    Finish,
    FinishReason,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ThinkingEnd,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from server.errors import InferError
from server.ids import message_id
from server.protocols import sse
from server.protocols.context import ResponseContext

STOP_REASONS = {
    FinishReason.END_TURN: "end_turn",
    FinishReason.MAX_TOKENS: "max_tokens",
    FinishReason.STOP_SEQUENCE: "stop_sequence",
    FinishReason.TOOL_USE: "tool_use",
}
TOOL_USE_PREFIX = "toolu_"


def error_body(error: InferError, request_id: str) -> dict[str, Any]:
    b3os: dict[str, Any] = {"code": error.code}
    if error.param is not None:
        b3os["param"] = error.param
    body: dict[str, Any] = {"type": error.anthropic_type, "message": error.message}
    if error.details:
        body["details"] = error.details
    return {"type": "error", "error": body, "request_id": request_id, "b3os": b3os}


def message_body(answer: Answer, context: ResponseContext) -> dict[str, Any]:
    return {
        "id": message_id(context.request_id),
        "type": "message",
        "role": "assistant",
        "model": context.model,
        "content": [_block(part) for part in answer.content],
        "stop_reason": STOP_REASONS[answer.finish.reason],
        "stop_sequence": answer.finish.stop_sequence,
        "usage": _final_usage(answer.finish),
        "b3os": context.b3os(streamed=False),
    }


def _block(part: Text | Thinking | ToolCall) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    if isinstance(part, Thinking):
        return {"type": "thinking", "thinking": part.text, "signature": part.signature or ""}
    return {
        "type": "tool_use",
        "id": TOOL_USE_PREFIX + part.id,
        "name": part.name,
        "input": tool_input(part.arguments),
    }


def tool_input(arguments: str) -> dict[str, Any]:
    """The arguments as the object Anthropic's `input` is. A call cut short by max_tokens has
    arguments that do not parse: its input is what could be read, which is nothing."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _usage(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, int]:
    """As Anthropic counts: `input_tokens` are the prompt's tokens not read from the cache, so
    that the three input counts add up to the prompt (what clients such as Claude Code sum to
    know how full the window is). The runtime keeps every prefix it computes on its own: no
    request writes to the cache, so `cache_creation_input_tokens` is 0."""
    return {
        "input_tokens": prompt_tokens - cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached_tokens,
        "output_tokens": output_tokens,
    }


def _final_usage(finish: Finish) -> dict[str, int]:
    usage = finish.usage
    return _usage(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)


class MessageStream:
    """Writes one message's events in Anthropic's order. A block starts with its first event
    (text, or a call with an empty `input` that `input_json_delta` fragments fill), and every
    open block is stopped before the next one and before `message_delta`."""

    def __init__(self, context: ResponseContext) -> None:
        self._context = context
        self._index = -1
        self._open: str | None = None  # the type of the open block

    def start(self) -> bytes:
        message: dict[str, Any] = {
            "id": message_id(self._context.request_id),
            "type": "message",
            "role": "assistant",
            "model": self._context.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(self._context.prompt_tokens, self._context.cached_tokens, 0),
        }
        return sse.event({"type": "message_start", "message": message}, "message_start")

    def encode(self, event: Event) -> bytes:
        if isinstance(event, TextDelta):
            opened = b"" if self._open == "text" else self._start({"type": "text", "text": ""})
            return opened + self._delta({"type": "text_delta", "text": event.text})
        if isinstance(event, ThinkingDelta):
            block = {"type": "thinking", "thinking": "", "signature": ""}
            opened = b"" if self._open == "thinking" else self._start(block)
            return opened + self._delta({"type": "thinking_delta", "thinking": event.text})
        if isinstance(event, ThinkingEnd):
            # The signature comes last, before the block stops (an empty reasoning still has one).
            block = {"type": "thinking", "thinking": "", "signature": ""}
            opened = b"" if self._open == "thinking" else self._start(block)
            signed = self._delta({"type": "signature_delta", "signature": event.signature})
            return opened + signed + self._stop()
        if isinstance(event, ToolCallStart):
            block = {"type": "tool_use", "id": TOOL_USE_PREFIX + event.id, "name": event.name}
            return self._start({**block, "input": {}})
        if isinstance(event, ToolCallDelta):
            return self._delta({"type": "input_json_delta", "partial_json": event.arguments})
        if isinstance(event, ToolCallEnd):
            return self._stop()
        if isinstance(event, Finish):
            return self._finish(event)
        raise TypeError(f"not an event: {event!r}")

    def _start(self, block: dict[str, Any]) -> bytes:
        stopped = self._stop()
        self._index += 1
        self._open = block["type"]
        return stopped + sse.event(
            {"type": "content_block_start", "index": self._index, "content_block": block},
            "content_block_start",
        )

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse.event(
            {"type": "content_block_delta", "index": self._index, "delta": delta},
            "content_block_delta",
        )

    def _stop(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return sse.event({"type": "content_block_stop", "index": self._index}, "content_block_stop")

    def _finish(self, finish: Finish) -> bytes:
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": STOP_REASONS[finish.reason],
                "stop_sequence": finish.stop_sequence,
            },
            "usage": _final_usage(finish),
            "b3os": self._context.b3os(streamed=True),
        }
        return (
            self._stop()
            + sse.event(delta, "message_delta")
            + sse.event({"type": "message_stop"}, "message_stop")
        )

    def error(self, error: InferError) -> bytes:
        """A failure after the stream started ends it with an `error` event, and nothing after."""
        return sse.event(error_body(error, self._context.request_id), "error")

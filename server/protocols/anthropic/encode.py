"""Canonical events -> Anthropic Messages: the stream (`message_start` ... `message_stop`), the
folded message body, and the error shape."""

from __future__ import annotations

from typing import Any

from server.canonical import Answer, Event, Finish, FinishReason, TextDelta
from server.errors import InferError
from server.ids import message_id
from server.protocols import sse
from server.protocols.context import ResponseContext

STOP_REASONS = {
    FinishReason.END_TURN: "end_turn",
    FinishReason.MAX_TOKENS: "max_tokens",
    FinishReason.STOP_SEQUENCE: "stop_sequence",
}


def error_body(error: InferError, request_id: str) -> dict[str, Any]:
    b3os: dict[str, Any] = {"code": error.code}
    if error.param is not None:
        b3os["param"] = error.param
    return {
        "type": "error",
        "error": {"type": error.anthropic_type, "message": error.message},
        "request_id": request_id,
        "b3os": b3os,
    }


def message_body(answer: Answer, context: ResponseContext) -> dict[str, Any]:
    content = [{"type": "text", "text": answer.text}] if answer.text else []
    return {
        "id": message_id(context.request_id),
        "type": "message",
        "role": "assistant",
        "model": context.model,
        "content": content,
        "stop_reason": STOP_REASONS[answer.finish.reason],
        "stop_sequence": answer.finish.stop_sequence,
        "usage": _usage(answer.finish),
        "b3os": context.b3os(streamed=False),
    }


def _usage(finish: Finish) -> dict[str, int]:
    return {
        "input_tokens": finish.usage.prompt_tokens,
        "output_tokens": finish.usage.completion_tokens,
    }


class MessageStream:
    """Writes one message's events in Anthropic's order. Blocks open lazily: a text block starts
    with the first text, and every open block is stopped before `message_delta`."""

    def __init__(self, context: ResponseContext) -> None:
        self._context = context
        self._index = -1
        self._open = False

    def start(self) -> bytes:
        message: dict[str, Any] = {
            "id": message_id(self._context.request_id),
            "type": "message",
            "role": "assistant",
            "model": self._context.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self._context.prompt_tokens, "output_tokens": 0},
        }
        return sse.event({"type": "message_start", "message": message}, "message_start")

    def encode(self, event: Event) -> bytes:
        if isinstance(event, TextDelta):
            return self._text(event.text)
        return self._finish(event)

    def _text(self, text: str) -> bytes:
        out = b""
        if not self._open:
            self._index += 1
            self._open = True
            block = {"type": "text", "text": ""}
            out += sse.event(
                {"type": "content_block_start", "index": self._index, "content_block": block},
                "content_block_start",
            )
        delta = {"type": "text_delta", "text": text}
        return out + sse.event(
            {"type": "content_block_delta", "index": self._index, "delta": delta},
            "content_block_delta",
        )

    def _close_block(self) -> bytes:
        if not self._open:
            return b""
        self._open = False
        return sse.event({"type": "content_block_stop", "index": self._index}, "content_block_stop")

    def _finish(self, finish: Finish) -> bytes:
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": STOP_REASONS[finish.reason],
                "stop_sequence": finish.stop_sequence,
            },
            "usage": _usage(finish),
            "b3os": self._context.b3os(streamed=True),
        }
        return (
            self._close_block()
            + sse.event(delta, "message_delta")
            + sse.event({"type": "message_stop"}, "message_stop")
        )

    def error(self, error: InferError) -> bytes:
        """A failure after the stream started ends it with an `error` event."""
        return sse.event(error_body(error, self._context.request_id), "error")

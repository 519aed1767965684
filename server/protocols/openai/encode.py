"""Canonical events -> OpenAI Chat Completions: `chat.completion.chunk` events ending with
`data: [DONE]`, the folded `chat.completion` body, and the error shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from server.canonical import (
    Answer,
    Event,
    Finish,
    FinishReason,
    Logprobs,
    TextDelta,
    ThinkingDelta,
    TokenLogprob,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
)
from server.errors import InferError
from server.ids import completion_id
from server.protocols import sse
from server.protocols.context import ResponseContext

FINISH_REASONS = {
    FinishReason.END_TURN: "stop",
    FinishReason.MAX_TOKENS: "length",
    FinishReason.STOP_SEQUENCE: "stop",
    FinishReason.TOOL_USE: "tool_calls",
}
CALL_PREFIX = "call_"


def error_body(error: InferError) -> dict[str, Any]:
    return {
        "error": {
            "message": error.message,
            "type": error.openai_type,
            "param": error.param,
            "code": error.code,
        }
    }


def usage(finish: Finish) -> dict[str, Any]:
    counts = finish.usage
    return {
        "prompt_tokens": counts.prompt_tokens,
        "completion_tokens": counts.completion_tokens,
        "total_tokens": counts.prompt_tokens + counts.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": counts.cached_tokens},
    }


def logprobs_body(tokens: Sequence[TokenLogprob]) -> dict[str, Any]:
    """OpenAI's `choices[].logprobs`: each token, its logprob, its bytes, its alternatives."""
    return {"content": [_token(token, top=True) for token in tokens], "refusal": None}


def _token(token: TokenLogprob, *, top: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "token": token.token,
        "logprob": token.logprob,
        "bytes": list(token.utf8),
    }
    if top:
        entry["top_logprobs"] = [_token(choice, top=False) for choice in token.top]
    return entry


def completion_body(answer: Answer, context: ResponseContext) -> dict[str, Any]:
    calls = answer.tool_calls
    message: dict[str, Any] = {
        "role": "assistant",
        "content": answer.text or (None if calls else ""),
        "refusal": None,
    }
    if calls:
        message["tool_calls"] = [_call(call) for call in calls]
    if answer.reasoning is not None:
        message["reasoning_content"] = answer.reasoning
    return {
        "id": completion_id(context.request_id),
        "object": "chat.completion",
        "created": context.created,
        "model": context.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": logprobs_body(answer.logprobs) if context.logprobs else None,
                "finish_reason": FINISH_REASONS[answer.finish.reason],
            }
        ],
        "usage": usage(answer.finish),
        "system_fingerprint": None,
        "b3os": context.b3os(streamed=False),
    }


def _call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": CALL_PREFIX + call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


class ChunkStream:
    """Writes one completion's chunks as OpenAI does: the role first, content deltas, the
    finish_reason chunk, the usage chunk (with `include_usage`, and `"usage": null` on every
    other chunk), then `[DONE]`. The b3os extension rides on the last chunk before `[DONE]`."""

    def __init__(self, context: ResponseContext, *, include_usage: bool) -> None:
        self._context = context
        self._include_usage = include_usage
        self._sent_role = False
        self._logprobs: list[TokenLogprob] = []  # tokens whose text has not been sent yet

    def start(self) -> bytes:
        return b""

    def _chunk(
        self, delta: dict[str, Any], finish_reason: str | None = None, *, logprobs: bool = False
    ) -> dict[str, Any]:
        """A chunk; with `logprobs`, carrying those of the tokens held since the last one."""
        found = None
        if logprobs and self._logprobs:
            found = logprobs_body(self._logprobs)
            self._logprobs = []
        chunk: dict[str, Any] = {
            "id": completion_id(self._context.request_id),
            "object": "chat.completion.chunk",
            "created": self._context.created,
            "model": self._context.model,
            "system_fingerprint": None,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": found, "finish_reason": finish_reason}
            ],
        }
        if self._include_usage:
            chunk["usage"] = None
        return chunk

    def _role(self) -> dict[str, Any]:
        if self._sent_role:
            return {}
        self._sent_role = True
        return {"role": "assistant"}

    def encode(self, event: Event) -> bytes:
        if isinstance(event, Logprobs):
            self._logprobs.extend(event.tokens)  # sent with the text they make
            return b""
        if isinstance(event, TextDelta):
            delta = {**self._role(), "content": event.text}
            return sse.event(self._chunk(delta, logprobs=True))
        held = b""
        if self._logprobs:  # tokens that made no text: reasoning, a tool call, an ending
            held = sse.event(self._chunk({**self._role()}, logprobs=True))
        return held + self._encode_other(event)

    def _encode_other(self, event: Event) -> bytes:
        if isinstance(event, ThinkingDelta):
            return sse.event(self._chunk({**self._role(), "reasoning_content": event.text}))
        if isinstance(event, ToolCallStart):
            function = {"name": event.name, "arguments": ""}
            call = {"index": event.index, "id": CALL_PREFIX + event.id, "type": "function"}
            delta = {**self._role(), "tool_calls": [{**call, "function": function}]}
            return sse.event(self._chunk(delta))
        if isinstance(event, ToolCallDelta):
            call = {"index": event.index, "function": {"arguments": event.arguments}}
            return sse.event(self._chunk({"tool_calls": [call]}))
        if isinstance(event, Finish):
            return self._finish(event)
        return b""  # a call's or the reasoning's end: the next chunk says all

    def _finish(self, finish: Finish) -> bytes:
        out = b""
        if not self._sent_role:  # an empty answer still names its role first
            out += sse.event(self._chunk({**self._role(), "content": ""}))
        last = self._chunk({}, FINISH_REASONS[finish.reason])
        if self._include_usage:
            out += sse.event(last)
            last = self._chunk({})
            last["choices"] = []
            last["usage"] = usage(finish)
        last["b3os"] = self._context.b3os(streamed=True)
        return out + sse.event(last) + sse.DONE

    def error(self, error: InferError) -> bytes:
        """A failure after the stream started ends it with an error event, and nothing after."""
        return sse.event(error_body(error))

"""Canonical events -> the OpenAI Responses API: the `response` object, its output items
(`reasoning`, `message` with `output_text`, `function_call`, `custom_tool_call`, a call inside a
namespace with its `namespace`), and the typed stream events with
their `sequence_number`. The streamed items are built by the same functions as the JSON body's,
and the stream's last event carries the whole response, as the JSON body would be."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from server.canonical import (
    Answer,
    Event,
    Finish,
    FinishReason,
    Logprobs,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ThinkingEnd,
    TokenLogprob,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from server.errors import InferError
from server.ids import output_item_id, response_id
from server.protocols import sse
from server.protocols.context import ResponseContext
from server.protocols.openai.encode import CALL_PREFIX
from server.protocols.responses.decode import ResponsesEcho
from server.protocols.responses.tools import CallTarget

Status = Literal["in_progress", "completed", "incomplete", "failed"]
_DELTAS = {
    "function_call": "response.function_call_arguments.delta",
    "custom_tool_call": "response.custom_tool_call_input.delta",
}


def response_object(
    context: ResponseContext,
    echo: ResponsesEcho,
    status: Status,
    output: Sequence[dict[str, Any]] = (),
    finish: Finish | None = None,
    error: InferError | None = None,
) -> dict[str, Any]:
    """The response, its members in OpenAI's order; `finish` once the answer ended."""
    incomplete = finish is not None and finish.reason is FinishReason.MAX_TOKENS
    return {
        "id": response_id(context.request_id),
        "object": "response",
        "created_at": context.created,
        "status": status,
        "background": False,
        "error": None if error is None else {"code": error.code, "message": error.message},
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": echo.instructions,
        "max_output_tokens": echo.max_output_tokens,
        "max_tool_calls": None,
        "model": context.model,
        "output": list(output),
        "parallel_tool_calls": echo.parallel_tool_calls,
        "previous_response_id": echo.previous_response_id,
        "prompt_cache_key": echo.prompt_cache_key,
        "reasoning": echo.reasoning,
        "safety_identifier": echo.safety_identifier,
        "service_tier": echo.service_tier,
        "store": echo.store,
        "temperature": echo.temperature,
        "text": echo.text,
        "tool_choice": echo.tool_choice,
        "tools": list(echo.tools),
        "top_logprobs": echo.top_logprobs,
        "top_p": echo.top_p,
        "truncation": "disabled",
        "usage": None if finish is None else usage(finish),
        "user": echo.user,
        "metadata": echo.metadata,
    }


def usage(finish: Finish) -> dict[str, Any]:
    counts = finish.usage
    return {
        "input_tokens": counts.prompt_tokens,
        "input_tokens_details": {"cached_tokens": counts.cached_tokens},
        "output_tokens": counts.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": counts.reasoning_tokens},
        "total_tokens": counts.prompt_tokens + counts.completion_tokens,
    }


def _final_status(finish: Finish) -> Status:
    return "incomplete" if finish.reason is FinishReason.MAX_TOKENS else "completed"


def reasoning_item(item_id: str, text: str | None) -> dict[str, Any]:
    """The reasoning as its summary (the node's reasoning is shown in the clear)."""
    summary = [] if text is None else [summary_part(text)]
    return {"id": item_id, "type": "reasoning", "summary": summary, "encrypted_content": None}


def summary_part(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def message_item(
    item_id: str, status: Status, parts: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "content": list(parts),
        "role": "assistant",
    }


def text_part(text: str, logprobs: Sequence[TokenLogprob] = ()) -> dict[str, Any]:
    return {
        "type": "output_text",
        "annotations": [],
        "logprobs": logprobs_body(logprobs),
        "text": text,
    }


def call_item(
    item_id: str, call_id: str, target: CallTarget, arguments: str, status: Status
) -> dict[str, Any]:
    """A function call (`arguments`, JSON) or a custom tool call (`input`, free-form)."""
    item: dict[str, Any] = {
        "id": item_id,
        "type": "custom_tool_call" if target.custom else "function_call",
        "status": status,
        "input" if target.custom else "arguments": arguments,
        "call_id": CALL_PREFIX + call_id,
        "name": target.name,
    }
    if target.namespace is not None:
        item["namespace"] = target.namespace
    return item


def _target(echo: ResponsesEcho, name: str) -> CallTarget:
    return echo.targets.get(name) or CallTarget(name)


def _call_prefix(target: CallTarget) -> str:
    return "ctc" if target.custom else "fc"


def logprobs_body(tokens: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    return [_token(token, top=True) for token in tokens]


def _token(token: TokenLogprob, *, top: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "token": token.token,
        "bytes": list(token.utf8),
        "logprob": token.logprob,
    }
    if top:
        entry["top_logprobs"] = [_token(choice, top=False) for choice in token.top]
    return entry


def response_body(answer: Answer, context: ResponseContext, echo: ResponsesEcho) -> dict[str, Any]:
    status = _final_status(answer.finish)
    output: list[dict[str, Any]] = []
    logprobs: Sequence[TokenLogprob] = answer.logprobs if context.logprobs else ()
    last = len(answer.content) - 1
    for index, block in enumerate(answer.content):
        if isinstance(block, Thinking):
            item_id = output_item_id("rs", context.request_id, len(output))
            output.append(reasoning_item(item_id, block.text))
        elif isinstance(block, Text):
            item_id = output_item_id("msg", context.request_id, len(output))
            output.append(message_item(item_id, status, [text_part(block.text, logprobs)]))
            logprobs = ()  # every token's, on the first text
        else:
            cut = answer.cut_call and index == last
            call_status: Status = "incomplete" if cut else "completed"
            target = _target(echo, block.name)
            item_id = output_item_id(_call_prefix(target), context.request_id, len(output))
            output.append(call_item(item_id, block.id, target, block.arguments, call_status))
    body = response_object(context, echo, status, output, answer.finish)
    body["b3os"] = context.b3os(streamed=False)
    return body


class ResponseStream:
    """Writes one response's events as OpenAI does: `response.created` and `.in_progress`, then
    per output item `output_item.added`, its parts and deltas, `output_item.done`, and last
    `response.completed` (or `.incomplete`, cut by max_output_tokens) with the whole response.
    A failure after the start is an `error` event and `response.failed`. `ended` hears of the
    whole response as the last event carries it (to keep it, where the request says so)."""

    def __init__(
        self,
        context: ResponseContext,
        echo: ResponsesEcho,
        ended: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._context = context
        self._echo = echo
        self._ended = ended
        self._sequence = 0
        self._output: list[dict[str, Any]] = []  # the items done
        self._open: dict[str, Any] | None = None  # the item being written
        self._pieces: list[str] = []  # its text, reasoning or arguments so far
        self._held: list[TokenLogprob] = []  # logprobs whose text has not been sent
        self._logprobs: list[TokenLogprob] = []  # those of the open message's text

    def _event(self, kind: str, **members: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._sequence, **members}
        self._sequence += 1
        return sse.event(data, kind)

    def _response(self, status: Status, **kwargs: Any) -> dict[str, Any]:
        return response_object(self._context, self._echo, status, self._output, **kwargs)

    def start(self) -> bytes:
        created = self._response("in_progress")
        return self._event("response.created", response=created) + self._event(
            "response.in_progress", response=created
        )

    @property
    def _index(self) -> int:
        return len(self._output)

    def _item_ref(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": self._index}

    def encode(self, event: Event) -> bytes:
        if isinstance(event, Logprobs):
            self._held.extend(event.tokens)
            return b""
        if isinstance(event, TextDelta):
            return self._text(event.text)
        if isinstance(event, ThinkingDelta):
            return self._thinking(event.text)
        if isinstance(event, ThinkingEnd):
            return self._close()
        if isinstance(event, ToolCallStart):
            out = self._close()
            target = _target(self._echo, event.name)
            item_id = output_item_id(_call_prefix(target), self._context.request_id, self._index)
            self._open = call_item(item_id, event.id, target, "", "in_progress")
            return out + self._event(
                "response.output_item.added", output_index=self._index, item=self._open
            )
        if isinstance(event, ToolCallDelta):
            self._pieces.append(event.arguments)
            assert self._open is not None
            kind = _DELTAS[self._open["type"]]
            return self._event(kind, **self._item_ref(), delta=event.arguments)
        if isinstance(event, ToolCallEnd):
            return self._close("completed" if event.complete else "incomplete")
        return self._finish(event)

    def _text(self, text: str) -> bytes:
        out = b""
        if self._open is None or self._open["type"] != "message":
            out += self._close()
            item_id = output_item_id("msg", self._context.request_id, self._index)
            self._open = message_item(item_id, "in_progress")
            out += self._event(
                "response.output_item.added", output_index=self._index, item=self._open
            )
            out += self._event(
                "response.content_part.added",
                **self._item_ref(),
                content_index=0,
                part=text_part(""),
            )
        tokens = self._held if self._context.logprobs else []
        self._logprobs.extend(tokens)
        self._held = []
        self._pieces.append(text)
        return out + self._event(
            "response.output_text.delta",
            **self._item_ref(),
            content_index=0,
            delta=text,
            logprobs=logprobs_body(tokens),
        )

    def _thinking(self, text: str) -> bytes:
        out = b""
        if self._open is None:
            item_id = output_item_id("rs", self._context.request_id, self._index)
            self._open = reasoning_item(item_id, None)
            out += self._event(
                "response.output_item.added", output_index=self._index, item=self._open
            )
            out += self._event(
                "response.reasoning_summary_part.added",
                **self._item_ref(),
                summary_index=0,
                part=summary_part(""),
            )
        self._pieces.append(text)
        return out + self._event(
            "response.reasoning_summary_text.delta", **self._item_ref(), summary_index=0, delta=text
        )

    def _close(self, status: Status = "completed") -> bytes:
        """The open item's closing events, and the item as done."""
        item = self._open
        if item is None:
            return b""
        ref = self._item_ref()
        text = "".join(self._pieces)
        out = b""
        if item["type"] == "message":
            part = text_part(text, self._logprobs)
            out += self._event(
                "response.output_text.done",
                **ref,
                content_index=0,
                text=text,
                logprobs=part["logprobs"],
            )
            out += self._event("response.content_part.done", **ref, content_index=0, part=part)
            item = message_item(item["id"], status, [part])
        elif item["type"] == "reasoning":
            out += self._event(
                "response.reasoning_summary_text.done", **ref, summary_index=0, text=text
            )
            out += self._event(
                "response.reasoning_summary_part.done",
                **ref,
                summary_index=0,
                part=summary_part(text),
            )
            item = reasoning_item(item["id"], text)
        elif item["type"] == "custom_tool_call":
            out += self._event("response.custom_tool_call_input.done", **ref, input=text)
            item = {**item, "input": text, "status": status}
        else:
            out += self._event(
                "response.function_call_arguments.done", **ref, name=item["name"], arguments=text
            )
            item = {**item, "arguments": text, "status": status}
        out += self._event("response.output_item.done", output_index=self._index, item=item)
        self._output.append(item)
        self._open, self._pieces, self._logprobs = None, [], []
        return out

    def _finish(self, finish: Finish) -> bytes:
        status = _final_status(finish)
        out = self._close(status)
        response = self._response(status, finish=finish)
        response["b3os"] = self._context.b3os(streamed=True)
        if self._ended is not None:
            self._ended(response)
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return out + self._event(kind, response=response)

    def error(self, error: InferError) -> bytes:
        """A failure after the stream started: `error`, then `response.failed`; nothing after."""
        failed = self._response("failed", error=error)
        failed["b3os"] = self._context.b3os(streamed=True)
        return self._event(
            "error", code=error.code, message=error.message, param=error.param
        ) + self._event("response.failed", response=failed)

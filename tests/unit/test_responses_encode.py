"""Canonical events -> the exact OpenAI Responses wire: the body's items, the stream's typed
events with their sequence numbers, and the stream's last response equal to the JSON body."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

from server.canonical import (
    Event,
    Finish,
    FinishReason,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    fold,
)
from server.errors import BackendUnavailable
from server.protocols.responses.decode import ResponsesEcho
from server.protocols.responses.encode import ResponseStream, response_body
from tests.unit.encoding import REQUEST_ID, context, parse_sse

ULID = REQUEST_ID.removeprefix("req_")
ECHO = ResponsesEcho()
END = Finish(FinishReason.END_TURN, Usage(7, 5, 2, 3))
CALL = (ToolCallStart(0, "abc", "f"), ToolCallDelta(0, '{"a": '), ToolCallDelta(0, "1}"))


def streamed(events: Sequence[Event]) -> list[tuple[str | None, dict[str, object]]]:
    stream = ResponseStream(context(), ECHO)
    raw = stream.start() + b"".join(stream.encode(event) for event in events)
    return parse_sse(raw)


def folded(events: Sequence[Event]) -> dict[str, object]:
    async def generate() -> AsyncGenerator[Event, None]:
        for event in events:
            yield event

    return response_body(asyncio.run(fold(generate())), context(), ECHO)


def test_reasoning_text_and_a_call_as_items() -> None:
    events = [
        ThinkingDelta("Hm"),
        ThinkingEnd("sig"),
        TextDelta("Let me look."),
        *CALL,
        ToolCallEnd(0),
        Finish(FinishReason.TOOL_USE, Usage(7, 5, 2, 3)),
    ]
    body = folded(events)
    assert body["id"] == f"resp_{ULID}" and body["status"] == "completed"
    assert body["output"] == [
        {"id": f"rs_{ULID}000", "type": "reasoning", "summary": [
            {"type": "summary_text", "text": "Hm"}], "encrypted_content": None},
        {"id": f"msg_{ULID}001", "type": "message", "status": "completed", "content": [
            {"type": "output_text", "annotations": [], "logprobs": [], "text": "Let me look."}
        ], "role": "assistant"},
        {"id": f"fc_{ULID}002", "type": "function_call", "status": "completed",
         "arguments": '{"a": 1}', "call_id": "call_abc", "name": "f"},
    ]  # fmt: skip
    assert body["usage"] == {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 2},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 12,
    }
    received = streamed(events)
    assert [data["sequence_number"] for _, data in received] == list(range(len(received)))
    assert [name for name, _ in received] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = received[-1][1]["response"]
    assert isinstance(final, dict)
    assert final["b3os"]["timing"]["ttft_ms"] == 12.5  # type: ignore[index]
    # The stream's last response is the JSON body, but for the b3os timing each names.
    assert {**final, "b3os": None} == {**body, "b3os": None}


def test_a_call_cut_in_its_arguments_is_incomplete() -> None:
    """max_output_tokens ended the answer inside a call's arguments: the response and that call
    are incomplete (its arguments are not whole JSON); an earlier call is completed."""
    cut = Finish(FinishReason.MAX_TOKENS, Usage(7, 5))
    first = (ToolCallStart(0, "a", "f"), ToolCallDelta(0, "{}"), ToolCallEnd(0))
    events = [*first, ToolCallStart(1, "b", "f"), ToolCallDelta(1, '{"a'), ToolCallEnd(1, False)]
    body = folded([*events, cut])
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [item["status"] for item in body["output"]] == ["completed", "incomplete"]  # type: ignore[index, union-attr]
    received = streamed([*events, cut])
    done = [data["item"] for name, data in received if name == "response.output_item.done"]
    assert [item["status"] for item in done] == ["completed", "incomplete"]  # type: ignore[index]
    assert received[-1][0] == "response.incomplete"
    assert received[-1][1]["response"]["output"] == body["output"]  # type: ignore[index]


def test_a_failure_after_the_start_is_error_then_failed() -> None:
    stream = ResponseStream(context(), ECHO)
    raw = stream.start() + stream.encode(TextDelta("Hi"))
    raw += stream.error(BackendUnavailable("restarting", retry_after=5))
    received = parse_sse(raw)
    assert [name for name, _ in received][-2:] == ["error", "response.failed"]
    assert received[-2][1] == {
        "type": "error",
        "sequence_number": len(received) - 2,
        "code": "infer_backend_unavailable",
        "message": "restarting",
        "param": None,
    }
    failed = received[-1][1]["response"]
    assert failed["status"] == "failed"  # type: ignore[index]
    assert failed["error"] == {"code": "infer_backend_unavailable", "message": "restarting"}  # type: ignore[index]


def test_an_answer_of_nothing_has_no_items() -> None:
    body = folded([END])
    assert body["output"] == [] and body["status"] == "completed"
    assert [name for name, _ in streamed([END])][-1] == "response.completed"

"""A request's `input` as the response store keeps it (`server.protocols.responses.items`), and
the node's own output items taken back as input: what `previous_response_id` puts before a
request's input decodes as the conversation sent whole would."""

from __future__ import annotations

from server.canonical import (
    Finish,
    FinishReason,
    Message,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ThinkingEnd,
    ToolCall,
    ToolCallEnd,
    ToolResult,
    Usage,
)
from server.protocols.responses.decode import decode_responses
from server.protocols.responses.items import as_items, with_ids
from tests.unit.test_responses_encode import CALL, ULID, folded

TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}


def test_a_string_input_is_one_user_message() -> None:
    assert as_items("Hi") == [{"type": "message", "role": "user", "content": "Hi"}]
    assert as_items([{"role": "user", "content": "Hi"}]) == [{"role": "user", "content": "Hi"}]
    assert as_items(3) is None  # the decoder's to refuse


def test_kept_items_have_ids_and_text_parts() -> None:
    sent = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "assistant", "content": "Sure."},
        {"type": "function_call", "id": "fc_mine", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "3"},
    ]
    kept = with_ids(sent, f"req_{ULID}")
    assert kept == [
        {"type": "message", "role": "developer", "id": f"msg_{ULID}in000",
         "content": [{"type": "input_text", "text": "Be brief."}]},
        {"type": "message", "role": "assistant", "id": f"msg_{ULID}in001",
         "content": [{"type": "output_text", "text": "Sure.", "annotations": []}]},
        {"type": "function_call", "id": "fc_mine", "call_id": "c1", "name": "f",
         "arguments": "{}"},
        {"type": "function_call_output", "id": f"fco_{ULID}in003", "call_id": "c1",
         "output": "3"},
    ]  # fmt: skip
    assert sent[0] == {"role": "developer", "content": "Be brief."}  # what was sent, untouched
    as_sent = decode_responses({"model": "m", "input": sent, "tools": [TOOL]})[0]
    as_kept = decode_responses({"model": "m", "input": kept, "tools": [TOOL]})[0]
    assert as_kept.messages == as_sent.messages


def test_the_nodes_own_output_items_are_taken_as_input() -> None:
    """Reasoning, a message with output_text and a function call, as a body holds them."""
    output = folded(
        [
            ThinkingDelta("Hm"),
            ThinkingEnd("sig"),
            TextDelta("Let me look."),
            *CALL,
            ToolCallEnd(0),
            Finish(FinishReason.TOOL_USE, Usage(7, 5, 2, 3)),
        ]
    )["output"]
    assert isinstance(output, list)
    answer = {"type": "function_call_output", "call_id": "call_abc", "output": "3"}
    items = [*with_ids(as_items("Look it up.") or [], f"req_{ULID}"), *output, answer]
    request, _ = decode_responses({"model": "m", "input": items, "tools": [TOOL]})
    assert request.messages == (
        Message("user", (Text("Look it up."),)),
        Message(
            "assistant",
            (Thinking("Hm"), Text("Let me look."), ToolCall("call_abc", "f", '{"a": 1}')),
        ),
        Message("tool", (ToolResult("call_abc", (Text("3"),)),)),
    )

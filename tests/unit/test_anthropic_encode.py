"""Canonical events -> the exact Anthropic Messages wire."""

from __future__ import annotations

from dataclasses import replace

from server.canonical import (
    Answer,
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
    Usage,
)
from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.anthropic.encode import MessageStream, error_body, message_body
from tests.unit.encoding import REQUEST_ID, context, parse_sse

FINISH = Finish(FinishReason.STOP_SEQUENCE, Usage(7, 3, 5), stop_sequence="###")


def usage(input_tokens: int, cached: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": output_tokens,
    }


def test_stream_sends_anthropic_events_in_order() -> None:
    # 5 of the prompt's 7 tokens read from the cache: counted as Anthropic counts them.
    stream = MessageStream(replace(context(), cached_tokens=5))
    raw = (
        stream.start()
        + stream.encode(TextDelta("Hel"))
        + stream.encode(TextDelta("lo"))
        + stream.encode(FINISH)
    )
    events = parse_sse(raw)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert start["id"] == "msg_" + REQUEST_ID.removeprefix("req_")
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"] == usage(2, 5, 0)
    assert events[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert [data["delta"]["text"] for _, data in events[2:4]] == ["Hel", "lo"]
    delta = events[5][1]
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "###"}
    assert delta["usage"] == usage(2, 5, 3)
    assert delta["b3os"]["route"] == "local"
    assert delta["b3os"]["timing"]["ttft_ms"] == 12.5


def test_stream_without_text_opens_no_block() -> None:
    stream = MessageStream(context())
    finish = Finish(FinishReason.END_TURN, Usage(7, 1))
    names = [name for name, _ in parse_sse(stream.start() + stream.encode(finish))]
    assert names == ["message_start", "message_delta", "message_stop"]


def test_error_event_carries_the_anthropic_error_shape() -> None:
    [(name, data)] = parse_sse(MessageStream(context()).error(InvalidRequest("bad", param="x")))
    assert name == "error"
    assert data["type"] == "error"
    assert data["error"] == {"type": "invalid_request_error", "message": "bad"}


def test_message_body_is_the_folded_stream() -> None:
    body = message_body(Answer((Text("Hello"),), FINISH), context())
    assert body["type"] == "message" and body["role"] == "assistant"
    assert body["content"] == [{"type": "text", "text": "Hello"}]
    assert body["stop_reason"] == "stop_sequence"
    assert body["stop_sequence"] == "###"
    assert body["usage"] == usage(2, 5, 3)
    assert body["b3os"]["timing"]["model_ms"] == 40.0
    assert "ttft_ms" not in body["b3os"]["timing"]


def test_finish_reasons_map_to_anthropic_stop_reasons() -> None:
    for reason, expected in [
        (FinishReason.END_TURN, "end_turn"),
        (FinishReason.MAX_TOKENS, "max_tokens"),
        (FinishReason.STOP_SEQUENCE, "stop_sequence"),
    ]:
        body = message_body(Answer((), Finish(reason, Usage(1, 1))), context())
        assert body["stop_reason"] == expected


def test_error_body_names_the_code_and_parameter_under_b3os() -> None:
    error = UnsupportedParameter("not taken", param="tools.0.type")
    assert error_body(error, REQUEST_ID) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "not taken"},
        "request_id": REQUEST_ID,
        "b3os": {"code": "unsupported_parameter", "param": "tools.0.type"},
    }


def test_tool_use_blocks_stream_an_empty_input_then_json_fragments() -> None:
    stream = MessageStream(context())
    raw = b"".join(
        stream.encode(e)
        for e in (
            TextDelta("Checking."),
            ToolCallStart(0, "abc", "get_weather"),
            ToolCallDelta(0, '{"city": '),
            ToolCallDelta(0, '"Oslo"}'),
            ToolCallEnd(0),
            Finish(FinishReason.TOOL_USE, Usage(7, 9)),
        )
    )
    events = parse_sse(raw)
    assert [name for name, _ in events] == [
        "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    assert events[3][1]["content_block"] == {
        "type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {}
    }  # fmt: skip
    assert [e[1]["index"] for e in events[3:7]] == [1, 1, 1, 1]
    assert events[4][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"city": '}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_message_body_holds_tool_use_with_parsed_input() -> None:
    answer = Answer(
        (Text("Checking."), ToolCall("abc", "get_weather", '{"city": "Oslo"}')),
        Finish(FinishReason.TOOL_USE, Usage(7, 9)),
    )
    body = message_body(answer, context())
    assert body["content"][1] == {
        "type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {"city": "Oslo"}
    }  # fmt: skip
    assert body["stop_reason"] == "tool_use"


def test_a_call_cut_short_has_an_empty_input() -> None:
    answer = Answer((ToolCall("abc", "f", '{"ci'),), Finish(FinishReason.MAX_TOKENS, Usage(7, 9)))
    assert message_body(answer, context())["content"][0]["input"] == {}


def test_thinking_block_streams_deltas_then_its_signature() -> None:
    stream = MessageStream(context())
    raw = b"".join(
        stream.encode(e)
        for e in (
            ThinkingDelta("Hm"),
            ThinkingEnd("sig"),
            TextDelta("No."),
            Finish(FinishReason.END_TURN, Usage(7, 9)),
        )
    )
    events = parse_sse(raw)
    assert events[0][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert [e[1]["delta"] for e in events[1:3]] == [
        {"type": "thinking_delta", "thinking": "Hm"},
        {"type": "signature_delta", "signature": "sig"},
    ]
    assert events[3][0] == "content_block_stop"
    assert events[4][1]["content_block"]["type"] == "text"


def test_message_body_holds_the_signed_thinking_block() -> None:
    answer = Answer(
        (Thinking("Hm", "sig"), Text("No.")), Finish(FinishReason.END_TURN, Usage(7, 9))
    )
    assert message_body(answer, context())["content"][0] == {
        "type": "thinking",
        "thinking": "Hm",
        "signature": "sig",
    }

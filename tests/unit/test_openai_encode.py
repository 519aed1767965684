"""Canonical events -> the exact OpenAI Chat Completions wire."""

from __future__ import annotations

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
from server.errors import BackendUnavailable
from server.protocols.openai.encode import ChunkStream, completion_body, error_body
from tests.unit.encoding import REQUEST_ID, context, parse_sse

FINISH = Finish(FinishReason.MAX_TOKENS, Usage(7, 3, 4))


def _chunks(include_usage: bool) -> list[object]:
    stream = ChunkStream(context(), include_usage=include_usage)
    raw = stream.start() + stream.encode(TextDelta("Hi")) + stream.encode(TextDelta("!"))
    return [data for _, data in parse_sse(raw + stream.encode(FINISH))]


def test_stream_sends_role_content_finish_then_done() -> None:
    chunks = _chunks(include_usage=False)
    assert chunks[-1] == "[DONE]"
    body = chunks[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in body)
    assert {c["id"] for c in body} == {"chatcmpl-" + REQUEST_ID.removeprefix("req_")}
    assert [c["choices"][0]["delta"] for c in body] == [
        {"role": "assistant", "content": "Hi"},
        {"content": "!"},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in body] == [None, None, "length"]
    assert all("usage" not in c for c in body)
    assert "b3os" in body[-1] and all("b3os" not in c for c in body[:-1])


def test_include_usage_adds_a_usage_chunk_and_null_usage_elsewhere() -> None:
    chunks = _chunks(include_usage=True)
    assert chunks[-1] == "[DONE]"
    usage_chunk = chunks[-2]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    assert usage_chunk["b3os"]["timing"]["ttft_ms"] == 12.5
    assert all(c["usage"] is None for c in chunks[:-2])


def test_empty_answer_still_sends_the_role() -> None:
    stream = ChunkStream(context(), include_usage=False)
    chunks = [d for _, d in parse_sse(stream.encode(Finish(FinishReason.END_TURN, Usage(1, 1))))]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[1]["choices"][0]["finish_reason"] == "stop"


def test_completion_body_is_the_folded_stream() -> None:
    body = completion_body(Answer((Text("Hi!"),), FINISH), context())
    assert body["object"] == "chat.completion"
    assert body["created"] == 1793001600
    [choice] = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": "Hi!", "refusal": None}
    assert choice["finish_reason"] == "length"
    assert body["usage"]["total_tokens"] == 10
    assert body["b3os"]["timing"]["model_ms"] == 40.0


def test_stop_sequence_and_end_of_turn_both_finish_with_stop() -> None:
    for reason in (FinishReason.END_TURN, FinishReason.STOP_SEQUENCE):
        body = completion_body(Answer((), Finish(reason, Usage(1, 1))), context())
        assert body["choices"][0]["finish_reason"] == "stop"


def test_error_shape_is_openai_with_the_b3os_code() -> None:
    error = BackendUnavailable("restarting", retry_after=5)
    assert error_body(error) == {
        "error": {
            "message": "restarting",
            "type": "server_error",
            "param": None,
            "code": "infer_backend_unavailable",
        }
    }
    assert error.headers() == {"Retry-After": "5"}


def test_tool_calls_stream_head_then_argument_fragments() -> None:
    stream = ChunkStream(context(), include_usage=False)
    raw = b"".join(
        stream.encode(e)
        for e in (
            ToolCallStart(0, "abc", "get_weather"),
            ToolCallDelta(0, '{"city": '),
            ToolCallDelta(0, '"Oslo"}'),
            ToolCallEnd(0),
            Finish(FinishReason.TOOL_USE, Usage(7, 9)),
        )
    )
    chunks = [data for _, data in parse_sse(raw)][:-1]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    function = {"name": "get_weather", "arguments": ""}
    head = {"index": 0, "id": "call_abc", "type": "function", "function": function}
    assert deltas[0] == {"role": "assistant", "tool_calls": [head]}
    assert deltas[1] == {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_completion_with_calls_only_has_null_content() -> None:
    answer = Answer((ToolCall("abc", "f", "{}"),), Finish(FinishReason.TOOL_USE, Usage(7, 9)))
    message = completion_body(answer, context())["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {"id": "call_abc", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]


def test_reasoning_content_streams_and_folds() -> None:
    stream = ChunkStream(context(), include_usage=False)
    raw = (
        stream.encode(ThinkingDelta("Hm"))
        + stream.encode(ThinkingEnd("sig"))
        + stream.encode(TextDelta("No."))
    )
    deltas = [d["choices"][0]["delta"] for _, d in parse_sse(raw)]
    assert deltas == [{"role": "assistant", "reasoning_content": "Hm"}, {"content": "No."}]
    answer = Answer(
        (Thinking("Hm", "sig"), Text("No.")), Finish(FinishReason.END_TURN, Usage(7, 9))
    )
    message = completion_body(answer, context())["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("Hm", "No.")

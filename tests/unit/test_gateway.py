"""The gateway's two translations: the canonical request as the upstream's chat body, and the
upstream's chunks as canonical events."""

from __future__ import annotations

from server.canonical import (
    FinishReason,
    GenerateRequest,
    Message,
    ResponseFormat,
    Sampling,
    Text,
    TextDelta,
    ThinkingConfig,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingMode,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolChoiceKind,
    ToolResult,
    Usage,
)
from server.config import Settings
from server.gateway.generation import _Reader
from server.gateway.upstream import chat_body

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


def test_the_upstream_body_is_the_clients_request_streamed_with_usage() -> None:
    request = GenerateRequest(
        model="big-model",
        messages=(
            Message("system", (Text("Be brief."),)),
            Message("user", (Text("Weather?"),)),
            Message("assistant", (ToolCall("call_1", "get_weather", '{"city": "Oslo"}'),)),
            Message("tool", (ToolResult("call_1", (Text("Sunny"),)),)),
        ),
        sampling=Sampling(max_tokens=64, temperature=0.0, stop=("\n",), seed=7),
        tools=(Tool("get_weather", "The weather.", SCHEMA, strict=True),),
        tool_choice=ToolChoice(ToolChoiceKind.NAMED, "get_weather", parallel=False),
        response_format=ResponseFormat("json_schema", SCHEMA),
        thinking=ThinkingConfig(ThinkingMode.ADAPTIVE),
    )
    assert chat_body(request) == {
        "model": "big-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 64,
        "temperature": 0.0,
        "seed": 7,
        "stop": ["\n"],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "The weather.",
                    "parameters": SCHEMA,
                    "strict": True,
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": SCHEMA, "strict": True},
        },
        "chat_template_kwargs": {"enable_thinking": True},
    }


def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_the_upstreams_chunks_as_events() -> None:
    reader = _Reader()
    events = []
    for piece in (
        chunk({"role": "assistant", "reasoning_content": "Hm"}),
        chunk({"content": "Ok."}),
        chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "f"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "g"}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"a'}}]}),
        chunk({}, "length"),
        {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 12}},
    ):
        events += reader.read(piece)
    events += reader.close()
    assert events == [
        ThinkingDelta("Hm"),
        ThinkingEnd(""),
        TextDelta("Ok."),
        ToolCallStart(0, "a", "f"),
        ToolCallDelta(0, "{}"),
        ToolCallEnd(0),
        ToolCallStart(1, "b", "g"),
        ToolCallDelta(1, '{"a'),
        ToolCallEnd(1, complete=False),  # the answer ended inside its arguments
    ]
    assert reader.tokens == 6  # one per chunk that carried output, until the usage says
    finish = reader.finish(estimated_prompt=3)
    assert finish.reason is FinishReason.MAX_TOKENS
    assert finish.usage == Usage(9, 12, 0)


def test_without_usage_the_counts_are_the_nodes() -> None:
    reader = _Reader()
    reader.read(chunk({"content": "a"}))
    reader.read(chunk({"content": "b"}, "stop"))
    finish = reader.finish(estimated_prompt=5)
    assert (finish.reason, finish.usage) == (FinishReason.END_TURN, Usage(5, 2, 0))


def test_the_credentials_stay_out_of_the_settings_repr() -> None:
    settings = Settings(gateway_url="http://gw", gateway_api_key="gw-s3cret", engine_api_key="e-s3")
    assert "s3cret" not in repr(settings) and "e-s3" not in repr(settings)

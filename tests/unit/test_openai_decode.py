"""OpenAI Chat Completions JSON -> the canonical request."""

from __future__ import annotations

from typing import Any

import pytest

from server.canonical import (
    ResponseFormat,
    Text,
    Thinking,
    ThinkingMode,
    ToolCall,
    ToolChoice,
    ToolChoiceKind,
    ToolResult,
)
from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.openai.decode import decode_chat


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    return {**base, **overrides}


def test_minimal_request_leaves_max_tokens_to_the_context() -> None:
    request, options = decode_chat(body())
    assert request.sampling.max_tokens is None
    assert options.include_usage is False


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    request, _ = decode_chat(body(max_tokens=10, max_completion_tokens=5))
    assert request.sampling.max_tokens == 5


def test_developer_messages_are_system_messages() -> None:
    request, _ = decode_chat(
        body(
            messages=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
            ]
        )
    )
    assert request.messages[0].role == "system"


def test_stop_takes_a_string_or_a_list() -> None:
    assert decode_chat(body(stop="x"))[0].sampling.stop == ("x",)
    assert decode_chat(body(stop=["x", "y"]))[0].sampling.stop == ("x", "y")


def test_top_k_minus_one_turns_it_off() -> None:
    assert decode_chat(body(top_k=-1))[0].sampling.top_k is None


def test_include_usage() -> None:
    assert decode_chat(body(stream=True, stream_options={"include_usage": True}))[1].include_usage


def test_unlisted_message_members_are_ignored() -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "annotations": [], "audio": None},
        {"role": "user", "content": "Again"},
    ]
    request, _ = decode_chat(body(messages=messages))
    assert len(request.messages) == 3


def test_accepted_and_ignored_parameters() -> None:
    decode_chat(body(metadata={"a": "b"}, store=False, service_tier="auto", user="u", n=1))


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"n": 2}, "n"),
        ({"messages": [{"role": "user", "content": None}]}, "messages.0.content"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ({"top_k": 0}, "top_k"),
    ],
)
def test_invalid_requests_name_the_parameter(overrides: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        decode_chat(body(**overrides))
    assert raised.value.param == param


def test_unknown_parameter_is_unsupported() -> None:
    with pytest.raises(UnsupportedParameter) as raised:
        decode_chat(body(prompt_logprobs=1))
    assert raised.value.param == "prompt_logprobs"


def test_tool_history_and_tools() -> None:
    tool = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object"}},
    }
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Use the tool.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "3C"},
    ]
    request, _ = decode_chat(
        body(messages=messages, tools=[tool], tool_choice="required", parallel_tool_calls=False)
    )
    assert [m.role for m in request.messages] == ["user", "assistant", "tool"]
    assert request.messages[1].parts == (
        Thinking("Use the tool."),
        ToolCall("call_1", "get_weather", '{"city":"Oslo"}'),
    )
    assert request.messages[2].parts == (ToolResult("call_1", (Text("3C"),)),)
    assert request.tool_choice == ToolChoice(ToolChoiceKind.ANY, parallel=False)


def test_function_without_parameters_takes_an_empty_object() -> None:
    request, _ = decode_chat(body(tools=[{"type": "function", "function": {"name": "now"}}]))
    assert request.tools[0].input_schema == {"type": "object", "properties": {}}


def test_response_formats() -> None:
    assert decode_chat(body(response_format={"type": "text"}))[0].response_format is None
    assert decode_chat(body(response_format={"type": "json_object"}))[
        0
    ].response_format == ResponseFormat("json_object")
    schema = {"type": "object"}
    spec = {"name": "answer", "schema": schema, "strict": True, "description": "x"}
    assert decode_chat(body(response_format={"type": "json_schema", "json_schema": spec}))[
        0
    ].response_format == ResponseFormat("json_schema", schema, "response_format.json_schema.schema")


def test_enable_thinking_turns_on_a_reasoning_phase() -> None:
    request, _ = decode_chat(body(chat_template_kwargs={"enable_thinking": True}))
    assert request.thinking.mode is ThinkingMode.ADAPTIVE


def test_data_url_images_are_decoded() -> None:
    part = {
        "type": "image_url",
        "image_url": {"url": "data:image/jpg;base64,/9j/", "detail": "low"},
    }
    request, _ = decode_chat(body(messages=[{"role": "user", "content": [part]}]))
    [image] = request.images()
    assert (image.path, image.media_type, image.data) == (
        "messages.0.content.0",
        "image/jpeg",
        b"\xff\xd8\xff",
    )


def test_sampling_extensions() -> None:
    request, _ = decode_chat(
        body(
            min_p=0.1,
            repetition_penalty=1.2,
            presence_penalty=1,
            frequency_penalty=-1,
            logit_bias={"42": -100},
            seed=3,
        )
    )
    sampling = request.sampling
    assert (sampling.min_p, sampling.repetition_penalty) == (0.1, 1.2)
    assert (sampling.presence_penalty, sampling.frequency_penalty) == (1.0, -1.0)
    assert sampling.logit_bias == {42: -100.0}
    assert sampling.seed == 3


def test_route_gateway_is_carried() -> None:
    assert decode_chat(body(route="gateway"))[1].route == "gateway"

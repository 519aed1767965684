"""Anthropic Messages JSON -> the canonical request."""

from __future__ import annotations

from typing import Any

import pytest

from server.canonical import (
    Message,
    ResponseFormat,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingMode,
    ToolCall,
    ToolChoice,
    ToolChoiceKind,
    ToolResult,
)
from server.errors import InferError, InvalidRequest, UnsupportedParameter
from server.protocols.anthropic.decode import DecodeOptions, decode_count_tokens, decode_messages


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "m",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    return {**base, **overrides}


def test_minimal_request() -> None:
    request = decode_messages(body())
    assert request.model == "m"
    assert request.messages == (Message("user", (Text("Hi"),)),)
    assert request.sampling.max_tokens == 16
    assert request.stream is False


def test_system_blocks_are_joined_with_blank_lines_and_lead_the_messages() -> None:
    system = [
        {"type": "text", "text": "One."},
        {"type": "text", "text": "Two.", "cache_control": {"type": "ephemeral"}},
    ]
    request = decode_messages(body(system=system))
    assert request.messages[0] == Message("system", (Text("One.\n\nTwo."),))


def test_sampling_and_stop_sequences() -> None:
    request = decode_messages(
        body(temperature=0.5, top_p=0.9, top_k=40, stop_sequences=["###"], stream=True)
    )
    sampling = request.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.5, 0.9, 40)
    assert sampling.stop == ("###",)
    assert request.stream is True


def test_null_means_unset() -> None:
    request = decode_messages(body(temperature=None, system=None, stop_sequences=None, stream=None))
    assert request.sampling.temperature is None
    assert request.stream is False


def test_trailing_assistant_turn_is_continued() -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert decode_messages(body(messages=messages)).continues_answer


def test_metadata_and_service_tier_are_accepted_and_ignored() -> None:
    decode_messages(body(metadata={"user_id": "u"}, service_tier="auto"))


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
        ({"stop_sequences": [""]}, "stop_sequences.0"),
    ],
)
def test_invalid_requests_name_the_parameter(overrides: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        decode_messages(body(**overrides))
    assert raised.value.param == param
    assert raised.value.code == "invalid_request"


def test_unknown_parameter_is_unsupported() -> None:
    with pytest.raises(UnsupportedParameter) as raised:
        decode_messages(body(container="c1"))
    assert raised.value.param == "container"


def test_count_tokens_takes_no_max_tokens() -> None:
    request = decode_count_tokens({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})
    assert request.messages[0].text == "Hi"


WEATHER = {
    "name": "get_weather",
    "description": "Weather.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    "cache_control": {"type": "ephemeral"},
    "strict": True,
}


def test_tools_tool_choice_and_their_ignored_members() -> None:
    request = decode_messages(
        body(
            tools=[WEATHER],
            tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        )
    )
    [tool] = request.tools
    assert (tool.name, tool.strict) == ("get_weather", True)
    assert tool.input_schema["properties"] == {"city": {"type": "string"}}
    assert request.tool_choice == ToolChoice(ToolChoiceKind.NAMED, "get_weather", parallel=False)


def test_thinking_display_and_effort_are_accepted_and_ignored() -> None:
    request = decode_messages(
        body(
            max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 1024, "display": "omitted"},
            output_config={"effort": "low"},
        )
    )
    assert request.thinking == ThinkingConfig(ThinkingMode.ENABLED, 1024)
    assert request.response_format is None
    adaptive = decode_messages(body(thinking={"type": "adaptive", "display": "summarized"}))
    assert adaptive.thinking.mode is ThinkingMode.ADAPTIVE


def test_output_format_is_a_json_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    request = decode_messages(
        body(output_config={"format": {"type": "json_schema", "schema": schema}})
    )
    assert request.response_format == ResponseFormat(
        "json_schema", schema, "output_config.format.schema"
    )


def test_tool_results_become_tool_messages_ahead_of_the_rest_of_the_turn() -> None:
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "3C",
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    request = decode_messages(body(messages=messages, tools=[WEATHER]))
    assert [m.role for m in request.messages] == ["user", "assistant", "tool", "user"]
    assert request.messages[1].parts == (ToolCall("toolu_1", "get_weather", '{"city":"Oslo"}'),)
    assert request.messages[2].parts == (ToolResult("toolu_1", (Text("3C"),)),)


def test_thinking_and_redacted_thinking_in_history() -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "They greet me.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Hello"},
            ],
        },
        {"role": "user", "content": "Again"},
    ]
    parts = decode_messages(body(messages=messages)).messages[1].parts
    assert parts == (Thinking("They greet me.", "sig"), Text("Hello"))


def test_images_keep_where_they_stand() -> None:
    png = "iVBORw0KGgo="
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    url = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    request = decode_messages(body(messages=[{"role": "user", "content": [block, url]}]))
    first, second = request.images()
    assert (first.path, first.media_type, first.data) == (
        "messages.0.content.0",
        "image/png",
        b"\x89PNG\r\n\x1a\n",
    )
    assert (second.path, second.url) == ("messages.0.content.1", "https://example.com/a.png")


def test_keep_takes_a_system_message_where_it_stands() -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "system", "content": "Be brief."}]
    request = decode_messages(body(messages=messages), DecodeOptions(system_in_messages="keep"))
    assert [m.role for m in request.messages] == ["user", "system"]


CLAUDE_CODE = DecodeOptions("keep", tool_search=True, safeguards=True, attribution=True)
SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


# Two Claude Code sessions' first system blocks (captured from 2.1.332 `--bare -p`): the hash
# after the version follows the first user message.
ATTRIBUTIONS = [
    "x-anthropic-billing-header: cc_version=2.1.332.d44; cc_entrypoint=sdk-cli;",
    "x-anthropic-billing-header: cc_version=2.1.332.eac; cc_entrypoint=sdk-cli; cch=00000;",
]


@pytest.mark.parametrize("attribution", ATTRIBUTIONS)
def test_the_profile_leaves_claude_codes_attribution_block_out_of_the_prompt(
    attribution: str,
) -> None:
    system = [
        {"type": "text", "text": attribution},
        {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}},
    ]
    request = decode_messages(body(system=system), CLAUDE_CODE)
    assert request.messages[0] == Message("system", (Text("You are a Claude agent."),))
    counting = {k: v for k, v in body(system=system).items() if k != "max_tokens"}
    assert decode_count_tokens(counting, CLAUDE_CODE).messages == request.messages
    alone = decode_messages(body(system=system[:1]), CLAUDE_CODE)
    assert alone.messages == decode_messages(body(), CLAUDE_CODE).messages  # no system turn
    # Without the profile the contract holds: every block is the model's.
    plain = decode_messages(body(system=system))
    joined = f"{attribution}\n\nYou are a Claude agent."
    assert plain.messages[0] == Message("system", (Text(joined),))


def test_the_profile_keeps_a_block_that_only_begins_like_an_attribution() -> None:
    text = "x-anthropic-billing-header: cc_version=1;\nThe rest of the instructions."
    request = decode_messages(body(system=[{"type": "text", "text": text}]), CLAUDE_CODE)
    assert request.messages[0] == Message("system", (Text(text),))


def searched_tools(**extra: Any) -> dict[str, Any]:
    """Claude Code's shape: a search tool, a deferred placeholder, a deferred tool it loads."""
    tools = [
        {"name": "ToolSearch", "input_schema": SCHEMA},
        {"name": "DeferredToolPlaceholder", "input_schema": SCHEMA, "defer_loading": True},
        {"name": "WebFetch", "input_schema": SCHEMA, "defer_loading": True},
    ]
    return body(tools=tools, **extra)


def test_by_default_deferred_tools_and_safeguards_are_refused_as_the_contract_says() -> None:
    with pytest.raises(UnsupportedParameter) as raised:
        decode_messages(searched_tools())
    assert raised.value.param == "tools.1.defer_loading"
    with pytest.raises(UnsupportedParameter) as raised:
        decode_messages(body(safeguards={}))
    assert raised.value.param == "safeguards"


@pytest.mark.parametrize(
    "safeguards",
    [
        {"mode": "on"},
        # as Claude Code's full mode with automatic permissions sends it (context elided)
        [{"type": "dangerous_tool_use", "classifier_context": {"cwd": "/work", "mode": "auto"}}],
        [],
    ],
)
def test_the_profile_takes_safeguards_as_claude_code_sends_them(safeguards: Any) -> None:
    plain = decode_messages(body(), CLAUDE_CODE)
    assert decode_messages(body(safeguards=safeguards), CLAUDE_CODE) == plain  # changes nothing
    counting = {k: v for k, v in body(safeguards=safeguards).items() if k != "max_tokens"}
    counted = decode_count_tokens(counting, CLAUDE_CODE)
    assert counted.messages == plain.messages and counted.tools == plain.tools  # the same count
    with pytest.raises(UnsupportedParameter):
        decode_messages(body(safeguards=safeguards))


@pytest.mark.parametrize("safeguards", ["on", [1], 3])
def test_safeguards_of_another_shape_are_refused_under_the_profile(safeguards: Any) -> None:
    with pytest.raises(InvalidRequest) as raised:
        decode_messages(body(safeguards=safeguards), CLAUDE_CODE)
    assert raised.value.param == "safeguards"


def test_a_deferred_tool_is_left_out_until_a_tool_reference_loads_it() -> None:
    request = decode_messages(searched_tools(), CLAUDE_CODE)
    assert [tool.name for tool in request.tools] == ["ToolSearch"]
    messages = [
        {"role": "user", "content": "Fetch it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "ToolSearch", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
                }
            ],
        },
    ]
    loaded = decode_messages(searched_tools(messages=messages), CLAUDE_CODE)
    assert [(tool.name, tool.deferred) for tool in loaded.tools] == [
        ("ToolSearch", False),
        ("WebFetch", True),
    ]


def test_a_tool_reference_must_name_one_of_the_tools() -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "tool_reference", "tool_name": "Nope"}],
                }
            ],
        },
    ]
    with pytest.raises(InvalidRequest, match="Nope"):
        decode_messages(searched_tools(messages=messages), CLAUDE_CODE)
    with pytest.raises(UnsupportedParameter):  # the contract has no tool_reference
        decode_messages(body(messages=messages))


def test_a_thread_is_refused_with_the_code_the_sdks_fall_back_on() -> None:
    with pytest.raises(UnsupportedParameter) as raised:
        decode_messages(body(thread={"type": "create"}))
    assert raised.value.param == "thread"
    assert raised.value.details == {"error_code": "thread_unsupported_request"}


def test_hints_of_anthropics_current_definitions_are_taken() -> None:
    """What other agents send that changes nothing the node does: taken by default. Input
    examples are shown to the model; what would change where or by whom a tool runs is not."""
    tool = {
        "name": "get_weather",
        "description": "Weather.",
        "input_schema": SCHEMA,
        "eager_input_streaming": True,
        "input_examples": [{"city": "Oslo"}],
        "allowed_callers": ["direct"],
        "defer_loading": False,
        "cache_control": {"type": "ephemeral"},
    }
    request = decode_messages(
        body(tools=[tool], cache_control={"type": "ephemeral", "ttl": "1h"}, speed="fast",
             diagnostics={"previous_response_id": "msg_1"})
    )  # fmt: skip
    [decoded] = request.tools
    assert decoded.description == 'Weather.\n\nExamples of its input:\n{"city": "Oslo"}'
    for member, value, param in (
        ("allowed_callers", ["code_execution_20250825"], "tools.0.allowed_callers.0"),
        ("input_examples", ["Oslo"], "tools.0.input_examples.0"),
    ):
        with pytest.raises(InferError) as raised:
            decode_messages(body(tools=[{**tool, member: value}]))
        assert raised.value.param == param
    with pytest.raises(UnsupportedParameter) as refused:
        decode_messages(body(inference_geo="eu"))  # a placement, not a hint
    assert refused.value.param == "inference_geo"

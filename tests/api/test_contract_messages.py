"""The Messages contract, row by row, through the real server: what it refuses (status, shape,
B3OS code, parameter) and what it accepts and ignores. The Anthropic SDK must map each refusal
to its own exception class by status."""

from __future__ import annotations

import re
from typing import Any

import anthropic
import httpx
import pytest

from tests.api.contract import (
    MODEL,
    PNG_B64,
    TOO_LONG_FOR_THE_WINDOW,
    WEATHER_TOOL,
    Refusal,
    big_schema,
    deep_schema,
    messages_body,
    user,
    whole_prompt,
    without,
)

ANTHROPIC_ERROR_TYPES = {
    "invalid_request_error",
    "authentication_error",
    "billing_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "timeout_error",
    "overloaded_error",
}
SDK_ERRORS = {
    400: anthropic.BadRequestError,
    404: anthropic.NotFoundError,
    413: anthropic.ContentTooLargeError,
    503: anthropic.ServiceUnavailableError,
}
TOOL = {"tools": [WEATHER_TOOL]}

REFUSALS = [
    Refusal(
        "max_tokens is required",
        without(messages_body(), "max_tokens"),
        400,
        "invalid_request",
        "max_tokens",
    ),
    Refusal(
        "max_tokens at least 1", messages_body(max_tokens=0), 400, "invalid_request", "max_tokens"
    ),
    Refusal(
        "max_tokens an integer", messages_body(max_tokens="8"), 400, "invalid_request", "max_tokens"
    ),
    Refusal(
        "model is required", without(messages_body(), "model"), 400, "invalid_request", "model"
    ),
    Refusal(
        "messages are required",
        without(messages_body(), "messages"),
        400,
        "invalid_request",
        "messages",
    ),
    Refusal("messages not empty", messages_body(messages=[]), 400, "invalid_request", "messages"),
    Refusal(
        "temperature 0..1", messages_body(temperature=1.5), 400, "invalid_request", "temperature"
    ),
    Refusal("top_p 0..1", messages_body(top_p=1.01), 400, "invalid_request", "top_p"),
    Refusal("top_k at least 1", messages_body(top_k=0), 400, "invalid_request", "top_k"),
    Refusal(
        "stop sequences not empty",
        messages_body(stop_sequences=[""]),
        400,
        "invalid_request",
        "stop_sequences.0",
    ),
    Refusal(
        "role user or assistant",
        messages_body(messages=[{"role": "tool", "content": "x"}]),
        400,
        "invalid_request",
        "messages.0.role",
    ),
    Refusal(
        "a system message inside messages",
        messages_body(
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        ),
        400,
        "invalid_request",
        "messages.0.role",
        message_has="top-level system",
    ),
    Refusal(
        "content string or blocks",
        messages_body(messages=[{"role": "user", "content": 7}]),
        400,
        "invalid_request",
        "messages.0.content",
    ),
    Refusal(
        "unknown block type",
        messages_body(messages=user({"type": "video", "url": "x"})),
        400,
        "invalid_request",
        "messages.0.content.0.type",
    ),
    Refusal(
        "document blocks are not taken",
        messages_body(
            messages=user(
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "x"},
                }
            )
        ),
        400,
        "unsupported_parameter",
        "messages.0.content.0.type",
    ),
    Refusal(
        "file sources are not taken",
        messages_body(
            messages=user({"type": "image", "source": {"type": "file", "file_id": "file_1"}})
        ),
        400,
        "unsupported_parameter",
        "messages.0.content.0.source.type",
    ),
    Refusal(
        "image URLs only https",
        messages_body(
            messages=user(
                {"type": "image", "source": {"type": "url", "url": "http://example.com/a.png"}}
            )
        ),
        400,
        "invalid_request",
        "messages.0.content.0.source.url",
    ),
    Refusal(
        "image media types",
        messages_body(
            messages=user(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/bmp", "data": PNG_B64},
                }
            )
        ),
        400,
        "invalid_request",
        "messages.0.content.0.source.media_type",
    ),
    Refusal(
        "image data base64",
        messages_body(
            messages=user(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "not base64!"},
                }
            )
        ),
        400,
        "invalid_request",
        "messages.0.content.0.source.data",
    ),
    Refusal(
        "images only in user messages",
        messages_body(
            messages=[
                {"role": "user", "content": "Hi"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": PNG_B64,
                            },
                        }
                    ],
                },
            ]
        ),
        400,
        "invalid_request",
        "messages.1.content.0.type",
    ),
    Refusal(
        "the embedded model takes no images",
        messages_body(
            messages=user(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
                }
            )
        ),
        400,
        "invalid_request",
        "messages.0.content.0",
        message_has="image_input",
    ),
    Refusal(
        "tools Anthropic runs: web search",
        messages_body(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
        400,
        "unsupported_parameter",
        "tools.0.type",
        message_has="web_search_20250305",
    ),
    Refusal(
        "tools Anthropic defines: bash",
        messages_body(tools=[{"type": "bash_20250124", "name": "bash"}]),
        400,
        "unsupported_parameter",
        "tools.0.type",
    ),
    Refusal(
        "container",
        messages_body(container="container_1"),
        400,
        "unsupported_parameter",
        "container",
    ),
    Refusal(
        "mcp_servers",
        messages_body(mcp_servers=[{"type": "url", "url": "https://x", "name": "x"}]),
        400,
        "unsupported_parameter",
        "mcp_servers",
    ),
    Refusal(
        "route is chat only", messages_body(route="gateway"), 400, "unsupported_parameter", "route"
    ),
    Refusal(
        "tool name pattern",
        messages_body(tools=[{**WEATHER_TOOL, "name": "get weather"}]),
        400,
        "invalid_request",
        "tools.0.name",
    ),
    Refusal(
        "tool names unique",
        messages_body(tools=[WEATHER_TOOL, WEATHER_TOOL]),
        400,
        "invalid_request",
        "tools.1.name",
    ),
    Refusal(
        "tool input_schema required",
        messages_body(tools=[without(WEATHER_TOOL, "input_schema")]),
        400,
        "invalid_request",
        "tools.0.input_schema",
    ),
    Refusal(
        "tool input_schema a valid JSON Schema",
        messages_body(tools=[{**WEATHER_TOOL, "input_schema": {"type": 12}}]),
        400,
        "invalid_request",
        "tools.0.input_schema",
    ),
    Refusal(
        "input_schema over 64 KiB",
        messages_body(tools=[{**WEATHER_TOOL, "input_schema": big_schema(70_000)}]),
        400,
        "unsupported_parameter",
        "tools.0.input_schema",
    ),
    Refusal(
        "input_schema deeper than 32",
        messages_body(tools=[{**WEATHER_TOOL, "input_schema": deep_schema(33)}]),
        400,
        "unsupported_parameter",
        "tools.0.input_schema",
    ),
    Refusal(
        "tool_choice any needs tools",
        messages_body(tool_choice={"type": "any"}),
        400,
        "invalid_request",
        "tool_choice",
    ),
    Refusal(
        "tool_choice names one of tools",
        messages_body(tool_choice={"type": "tool", "name": "other"}, **TOOL),
        400,
        "invalid_request",
        "tool_choice.name",
    ),
    Refusal(
        "tool_choice types",
        messages_body(tool_choice={"type": "sometimes"}, **TOOL),
        400,
        "invalid_request",
        "tool_choice.type",
    ),
    Refusal(
        "output format schema deeper than 32",
        messages_body(output_config={"format": {"type": "json_schema", "schema": deep_schema(33)}}),
        400,
        "unsupported_parameter",
        "output_config.format.schema",
    ),
    Refusal(
        "output format schema over 64 KiB",
        messages_body(
            output_config={"format": {"type": "json_schema", "schema": big_schema(70_000)}}
        ),
        400,
        "unsupported_parameter",
        "output_config.format.schema",
    ),
    Refusal(
        "thinking budget at least 1024",
        messages_body(max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 1000}),
        400,
        "invalid_request",
        "thinking.budget_tokens",
    ),
    Refusal(
        "thinking budget below max_tokens",
        messages_body(max_tokens=1024, thinking={"type": "enabled", "budget_tokens": 1024}),
        400,
        "invalid_request",
        "thinking.budget_tokens",
        message_has="must be less than max_tokens",
    ),
    Refusal(
        "thinking types",
        messages_body(thinking={"type": "deep"}),
        400,
        "invalid_request",
        "thinking.type",
    ),
    Refusal(
        "a prompt beyond the context",
        messages_body(messages=TOO_LONG_FOR_THE_WINDOW),
        400,
        "context_length_exceeded",
        "messages",
        message_has="prompt is too long: ",
    ),
    Refusal(
        "a model this node does not serve",
        messages_body(model="claude-opus-4-1"),
        404,
        "model_not_available",
        "model",
        message_has="GET /v1/infer/models",
    ),
]


@pytest.mark.parametrize("case", REFUSALS, ids=str)
def test_refusals_in_the_anthropic_shape(http: httpx.Client, case: Refusal) -> None:
    response = http.post("/v1/infer/v1/messages", json=case.body)
    assert response.status_code == case.status, response.text
    body = response.json()
    assert set(body) == {"type", "error", "request_id", "b3os"}
    assert body["type"] == "error"
    assert body["error"]["type"] in ANTHROPIC_ERROR_TYPES
    assert set(body["error"]) == {"type", "message"}
    assert body["request_id"] == response.headers["x-request-id"]
    expected_b3os = {"code": case.code} | ({"param": case.param} if case.param else {})
    assert body["b3os"] == expected_b3os
    assert case.message_has in body["error"]["message"]


@pytest.mark.parametrize("case", REFUSALS, ids=str)
def test_the_sdk_maps_each_refusal_by_status(
    anthropic_client: anthropic.Anthropic, case: Refusal
) -> None:
    with pytest.raises(anthropic.APIStatusError) as raised:
        anthropic_client.post("/v1/messages", body=case.body, cast_to=object)
    assert type(raised.value) is SDK_ERRORS[case.status]
    assert raised.value.status_code == case.status


@pytest.mark.every_engine
def test_context_length_message_gives_both_counts(http: httpx.Client) -> None:
    body = messages_body(messages=TOO_LONG_FOR_THE_WINDOW)
    message = http.post("/v1/infer/v1/messages", json=body).json()["error"]["message"]
    match = re.fullmatch(r"prompt is too long: (\d+) tokens > (\d+) maximum", message)
    assert match is not None, message
    prompt, maximum = int(match.group(1)), int(match.group(2))
    assert prompt > maximum


def test_system_message_advice_names_the_fix(http: httpx.Client) -> None:
    body = messages_body(
        messages=[{"role": "user", "content": "Hi"}, {"role": "system", "content": "x"}]
    )
    error = http.post("/v1/infer/v1/messages", json=body).json()
    assert error["b3os"]["param"] == "messages.1.role"
    assert "system parameter" in error["error"]["message"]


ACCEPTED = [
    pytest.param(messages_body(metadata={"user_id": "u-1"}), id="metadata"),
    pytest.param(messages_body(service_tier="auto"), id="service_tier"),
    pytest.param(messages_body(context_management={"edits": []}), id="context_management"),
    pytest.param(messages_body(output_config={"effort": "high"}), id="output_config.effort"),
    pytest.param(
        messages_body(output_config={"effort": None, "format": None}), id="output_config nulls"
    ),
    pytest.param(
        messages_body(
            system=[
                {
                    "type": "text",
                    "text": "Be brief.",
                    "cache_control": {"type": "ephemeral", "ttl": "5m"},
                }
            ]
        ),
        id="cache_control on system blocks",
    ),
    pytest.param(
        messages_body(
            messages=user(
                {
                    "type": "text",
                    "text": "Hi",
                    "cache_control": {"type": "ephemeral"},
                    "citations": None,
                }
            )
        ),
        id="cache_control and citations on text blocks",
    ),
    pytest.param(
        messages_body(
            messages=[
                {"role": "user", "content": "Hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "redacted_thinking", "data": "opaque"},
                        {"type": "text", "text": "Hello"},
                    ],
                },
                {"role": "user", "content": "Again"},
            ]
        ),
        id="redacted thinking in history",
    ),
    pytest.param(messages_body(thinking={"type": "disabled"}), id="thinking disabled"),
    pytest.param(
        messages_body(thinking={"type": "adaptive", "display": "omitted"}), id="thinking.display"
    ),
    pytest.param(
        messages_body(
            tools=[{**WEATHER_TOOL, "cache_control": {"type": "ephemeral"}, "strict": True}],
            tool_choice={"type": "auto", "disable_parallel_tool_use": None},
        ),
        id="cache_control and strict on tools",
    ),
    pytest.param(messages_body(tool_choice={"type": "none"}), id="tool_choice none without tools"),
    pytest.param(
        messages_body(
            temperature=None,
            top_p=None,
            top_k=None,
            stop_sequences=None,
            system=None,
            stream=None,
            tools=None,
            tool_choice=None,
            thinking=None,
            metadata=None,
            service_tier=None,
            output_config=None,
        ),
        id="null means unset",
    ),
]


@pytest.mark.parametrize("body", ACCEPTED)
def test_accepted_and_ignored(http: httpx.Client, body: dict[str, Any]) -> None:
    response = http.post("/v1/infer/v1/messages", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["type"] == "message"


def test_sdk_query_string_and_anthropic_headers_change_nothing(http: httpx.Client) -> None:
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31"}
    response = http.post("/v1/infer/v1/messages?beta=true", json=messages_body(), headers=headers)
    assert response.status_code == 200
    counted = http.post(
        "/v1/infer/v1/messages/count_tokens?beta=true",
        json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]},
        headers=headers,
    )
    assert counted.status_code == 200
    assert counted.json()["input_tokens"] == whole_prompt(response.json()["usage"])


def test_count_tokens_refusals_are_in_the_anthropic_shape(http: httpx.Client) -> None:
    response = http.post(
        "/v1/infer/v1/messages/count_tokens", json={"model": MODEL, "messages": []}
    )
    assert response.status_code == 400
    assert response.json()["b3os"] == {"code": "invalid_request", "param": "messages"}

"""The Chat Completions contract, row by row, through the real server: what it refuses (status,
shape, B3OS code, parameter) and what it accepts and ignores. The OpenAI SDK must map each
refusal to its own exception class by status."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.api.contract import (
    CHAT_WEATHER_TOOL,
    PNG_B64,
    TOO_LONG_FOR_THE_WINDOW,
    Refusal,
    big_schema,
    chat_body,
    deep_schema,
    without,
)

OPENAI_ERROR_TYPES = {
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "rate_limit_error",
    "server_error",
}
SDK_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    404: openai.NotFoundError,
    503: openai.InternalServerError,
}
TOOL = {"tools": [CHAT_WEATHER_TOOL]}
DATA_URL = f"data:image/png;base64,{PNG_B64}"


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


REFUSALS = [
    Refusal("model is required", without(chat_body(), "model"), 400, "invalid_request", "model"),
    Refusal(
        "messages are required",
        without(chat_body(), "messages"),
        400,
        "invalid_request",
        "messages",
    ),
    Refusal("temperature 0..2", chat_body(temperature=2.5), 400, "invalid_request", "temperature"),
    Refusal("top_p 0..1", chat_body(top_p=-0.1), 400, "invalid_request", "top_p"),
    Refusal("max_tokens at least 1", chat_body(max_tokens=0), 400, "invalid_request", "max_tokens"),
    Refusal(
        "max_completion_tokens at least 1",
        chat_body(max_completion_tokens=0),
        400,
        "invalid_request",
        "max_completion_tokens",
    ),
    Refusal("n only 1", chat_body(n=2), 400, "invalid_request", "n"),
    Refusal(
        "presence_penalty -2..2",
        chat_body(presence_penalty=3),
        400,
        "invalid_request",
        "presence_penalty",
    ),
    Refusal(
        "frequency_penalty -2..2",
        chat_body(frequency_penalty=-2.5),
        400,
        "invalid_request",
        "frequency_penalty",
    ),
    Refusal(
        "top_logprobs 0..20",
        chat_body(logprobs=True, top_logprobs=21),
        400,
        "invalid_request",
        "top_logprobs",
    ),
    Refusal(
        "top_logprobs needs logprobs",
        chat_body(top_logprobs=2),
        400,
        "invalid_request",
        "top_logprobs",
    ),
    Refusal("top_k -1 or at least 1", chat_body(top_k=0), 400, "invalid_request", "top_k"),
    Refusal("top_k at least -1", chat_body(top_k=-2), 400, "invalid_request", "top_k"),
    Refusal("min_p 0..1", chat_body(min_p=1.5), 400, "invalid_request", "min_p"),
    Refusal(
        "repetition_penalty 0..2",
        chat_body(repetition_penalty=2.5),
        400,
        "invalid_request",
        "repetition_penalty",
    ),
    Refusal(
        "logit_bias keys are token ids",
        chat_body(logit_bias={"abc": 1}),
        400,
        "invalid_request",
        "logit_bias.abc",
    ),
    Refusal(
        "logit_bias -100..100",
        chat_body(logit_bias={"42": 150}),
        400,
        "invalid_request",
        "logit_bias.42",
    ),
    Refusal("stop strings", chat_body(stop=[1]), 400, "invalid_request", "stop.0"),
    Refusal(
        "prompt_logprobs is not taken",
        chat_body(prompt_logprobs=1),
        400,
        "unsupported_parameter",
        "prompt_logprobs",
    ),
    Refusal(
        "functions are not taken",
        chat_body(functions=[]),
        400,
        "unsupported_parameter",
        "functions",
    ),
    Refusal(
        "only enable_thinking in chat_template_kwargs",
        chat_body(chat_template_kwargs={"tools_in_system": True}),
        400,
        "unsupported_parameter",
        "chat_template_kwargs.tools_in_system",
    ),
    Refusal("route local or gateway", chat_body(route="edge"), 400, "invalid_request", "route"),
    Refusal(
        "role enum",
        chat_body(messages=[{"role": "wizard", "content": "x"}]),
        400,
        "invalid_request",
        "messages.0.role",
    ),
    Refusal(
        "null content only on assistant messages",
        chat_body(messages=[{"role": "user", "content": None}]),
        400,
        "invalid_request",
        "messages.0.content",
    ),
    Refusal(
        "tool messages need tool_call_id",
        chat_body(messages=[{"role": "tool", "content": "x"}]),
        400,
        "invalid_request",
        "messages.0.tool_call_id",
    ),
    Refusal(
        "part types",
        chat_body(
            messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]
        ),
        400,
        "invalid_request",
        "messages.0.content.0.type",
    ),
    Refusal(
        "image URLs https or data",
        chat_body(messages=[{"role": "user", "content": [image_part("http://example.com/a.png")]}]),
        400,
        "invalid_request",
        "messages.0.content.0.image_url.url",
    ),
    Refusal(
        "data URLs of images only",
        chat_body(
            messages=[{"role": "user", "content": [image_part("data:text/plain;base64,aGk=")]}]
        ),
        400,
        "invalid_request",
        "messages.0.content.0.image_url.url",
    ),
    Refusal(
        "image detail",
        chat_body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "max"}}
                    ],
                }
            ]
        ),
        400,
        "invalid_request",
        "messages.0.content.0.image_url.detail",
    ),
    Refusal(
        "images only in user messages",
        chat_body(
            messages=[
                {"role": "system", "content": [image_part(DATA_URL)]},
                {"role": "user", "content": "Hi"},
            ]
        ),
        400,
        "invalid_request",
        "messages.0.content.0.type",
    ),
    Refusal(
        "the embedded model takes no images",
        chat_body(messages=[{"role": "user", "content": [image_part(DATA_URL)]}]),
        400,
        "invalid_request",
        "messages.0.content.0",
        message_has="image_input",
    ),
    Refusal(
        "tool type function",
        chat_body(tools=[{"type": "code_interpreter"}]),
        400,
        "invalid_request",
        "tools.0.type",
    ),
    Refusal(
        "tool name pattern",
        chat_body(tools=[{"type": "function", "function": {"name": "a" * 65}}]),
        400,
        "invalid_request",
        "tools.0.function.name",
    ),
    Refusal(
        "tool names unique",
        chat_body(tools=[CHAT_WEATHER_TOOL, CHAT_WEATHER_TOOL]),
        400,
        "invalid_request",
        "tools.1.function.name",
    ),
    Refusal(
        "parameters over 64 KiB",
        chat_body(
            tools=[
                {"type": "function", "function": {"name": "f", "parameters": big_schema(70_000)}}
            ]
        ),
        400,
        "unsupported_parameter",
        "tools.0.function.parameters",
    ),
    Refusal(
        "parameters deeper than 32",
        chat_body(
            tools=[{"type": "function", "function": {"name": "f", "parameters": deep_schema(33)}}]
        ),
        400,
        "unsupported_parameter",
        "tools.0.function.parameters",
    ),
    Refusal(
        "tool_choice required needs tools",
        chat_body(tool_choice="required"),
        400,
        "invalid_request",
        "tool_choice",
    ),
    Refusal(
        "tool_choice names one of tools",
        chat_body(tool_choice={"type": "function", "function": {"name": "other"}}, **TOOL),
        400,
        "invalid_request",
        "tool_choice.function.name",
    ),
    Refusal(
        "tool_choice values",
        chat_body(tool_choice="sometimes"),
        400,
        "invalid_request",
        "tool_choice",
    ),
    Refusal(
        "response_format types",
        chat_body(response_format={"type": "xml"}),
        400,
        "invalid_request",
        "response_format.type",
    ),
    Refusal(
        "json_schema needs a name",
        chat_body(
            response_format={"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}
        ),
        400,
        "invalid_request",
        "response_format.json_schema.name",
    ),
    Refusal(
        "json_schema schema deeper than 32",
        chat_body(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": deep_schema(33)},
            }
        ),
        400,
        "unsupported_parameter",
        "response_format.json_schema.schema",
    ),
    Refusal(
        "a prompt beyond the context",
        chat_body(messages=TOO_LONG_FOR_THE_WINDOW),
        400,
        "context_length_exceeded",
        "messages",
        message_has="prompt is too long: ",
    ),
    Refusal(
        "a model this node does not serve",
        chat_body(model="gpt-5"),
        404,
        "model_not_available",
        "model",
        message_has='"route":"gateway"',
    ),
    Refusal(
        "route gateway without a gateway",
        chat_body(model="gpt-5", route="gateway"),
        503,
        "infer_backend_unavailable",
        None,
        message_has="gateway",
    ),
]


@pytest.mark.parametrize("case", REFUSALS, ids=str)
def test_refusals_in_the_openai_shape(http: httpx.Client, case: Refusal) -> None:
    response = http.post("/v1/infer/chat/completions", json=case.body)
    assert response.status_code == case.status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] in OPENAI_ERROR_TYPES
    assert (error["code"], error["param"]) == (case.code, case.param)
    assert case.message_has in error["message"]
    assert response.headers["x-request-id"].startswith("req_")


@pytest.mark.parametrize("case", REFUSALS, ids=str)
def test_the_sdk_maps_each_refusal_by_status(openai_client: openai.OpenAI, case: Refusal) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        openai_client.post("/chat/completions", body=case.body, cast_to=object)
    assert type(raised.value) is SDK_ERRORS[case.status]
    assert raised.value.status_code == case.status
    assert raised.value.code == case.code


ACCEPTED = [
    pytest.param(
        chat_body(metadata={"a": "b"}, store=False, service_tier="auto", user="u-1"),
        id="metadata store service_tier user",
    ),
    pytest.param(chat_body(n=1, route="local", seed=7), id="n 1, route local, seed"),
    pytest.param(
        chat_body(stream_options={"include_usage": True}), id="stream_options without stream"
    ),
    pytest.param(
        chat_body(chat_template_kwargs={"enable_thinking": False}), id="enable_thinking false"
    ),
    pytest.param(
        chat_body(chat_template_kwargs={"enable_thinking": True}), id="enable_thinking true"
    ),
    pytest.param(chat_body(response_format={"type": "text"}), id="response_format text"),
    pytest.param(chat_body(tool_choice="none", parallel_tool_calls=False), id="tool_choice none"),
    pytest.param(
        chat_body(
            messages=[
                {"role": "user", "content": "Hi", "name": "ada"},
                {
                    "role": "assistant",
                    "content": "Hello",
                    "annotations": [],
                    "audio": None,
                    "refusal": None,
                },
                {"role": "user", "content": [{"type": "text", "text": "Again"}]},
            ]
        ),
        id="unlisted members echoed from a response",
    ),
    pytest.param(
        chat_body(
            messages=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
            ]
        ),
        id="developer role",
    ),
    pytest.param(
        chat_body(
            top_k=-1,
            min_p=0.1,
            repetition_penalty=1.1,
            presence_penalty=0.5,
            frequency_penalty=0.5,
            top_p=0,
        ),
        id="runtime sampling extensions",
    ),
    pytest.param(chat_body(logit_bias={"42": -5}), id="logit_bias"),
    pytest.param(
        chat_body(
            temperature=None,
            top_p=None,
            max_tokens=None,
            max_completion_tokens=4,
            stop=None,
            seed=None,
            n=None,
            tools=None,
            tool_choice=None,
            response_format=None,
            stream=None,
            stream_options=None,
            logprobs=None,
            top_logprobs=None,
            metadata=None,
            route=None,
            chat_template_kwargs=None,
        ),
        id="null means unset",
    ),
]


@pytest.mark.parametrize("body", ACCEPTED)
def test_accepted_and_ignored(http: httpx.Client, body: dict[str, Any]) -> None:
    response = http.post("/v1/infer/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["object"] == "chat.completion"

"""The OpenAPI 3.1 document of this server's own routes, served at `GET /openapi.json`: every
status each operation answers, in the shape it is rendered in (Anthropic on the Messages routes,
OpenAI elsewhere and for what is refused before the infer layer), with the headers that carry
the request id, timings and limits. Request schemas come from the protocols' `schema.py`."""

from __future__ import annotations

from typing import Any

from server import __version__
from server.models.embedded import SERVED_NAME
from server.protocols.anthropic.schema import COUNT_TOKENS_REQUEST, MESSAGES_REQUEST
from server.protocols.openai.schema import CHAT_REQUEST
from server.protocols.schema import Schema, obj, string

JSON, EVENT_STREAM = "application/json", "text/event-stream"
INTEGER: Schema = {"type": "integer"}
NUMBER: Schema = {"type": "number"}
REQUEST_ID = string(pattern="^req_[0-9a-hjkmnp-tv-z]{26}$")


def _header(description: str, schema: Schema, *, required: bool = False) -> dict[str, Any]:
    return {"description": description, "required": required, "schema": schema}


# after_request sets these on every response, errors included.
HEADERS = {
    "x-request-id": _header("The request ID.", REQUEST_ID, required=True),
    "request-id": _header("The request ID, as Anthropic SDKs read it.", REQUEST_ID, required=True),
    "Server-Timing": _header(
        "Phase durations in ms (template, ttft, model; total on JSON answers).", string()
    ),
}
RATE_LIMIT = {
    "RateLimit-Limit": _header("The limit of the window that applies.", INTEGER),
    "RateLimit-Remaining": _header("What is left of it in the current window.", INTEGER),
    "RateLimit-Reset": _header("Seconds until the window resets.", INTEGER),
}
RETRY_AFTER = {
    "Retry-After": _header("Seconds to wait before retrying.", {"type": "integer", "minimum": 0})
}
WWW_AUTHENTICATE = {"WWW-Authenticate": _header("The scheme to authenticate with.", string())}

ANTHROPIC_ERROR = obj(
    {
        "type": {"const": "error"},
        "error": obj(
            {
                "type": string(),
                "message": string(),
                "details": obj({"error_code": string()}, closed=False),
            },
            ("type", "message"),
        ),
        "request_id": string(),
        "b3os": obj({"code": string(), "param": string()}, ("code",)),
    },
    ("type", "error"),
    description="The Anthropic error body; the B3OS code and offending parameter under b3os.",
)
OPENAI_ERROR = obj(
    {
        "error": obj(
            {
                "message": string(),
                "type": string(),
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
            ("message", "type", "param", "code"),
        )
    },
    ("error",),
    description="The OpenAI error body; code is the B3OS code.",
)
# The Messages routes answer in the Anthropic shape, but what is refused before the infer layer
# (credentials, scopes, body size, routing) comes in the OpenAI one.
MESSAGES_ERROR: Schema = {"oneOf": [ANTHROPIC_ERROR, OPENAI_ERROR]}

B3OS = obj(
    {
        "route": {"enum": ["local", "gateway"]},
        "node": string(),
        "timing": obj({"ttft_ms": NUMBER, "model_ms": NUMBER, "total_ms": NUMBER}),
    },
    description="B3OS extension; SDKs ignore it.",
)
MESSAGE = obj(
    {
        "id": string(),
        "type": {"const": "message"},
        "role": {"const": "assistant"},
        "content": {"type": "array", "items": {"type": "object"}},
        "model": string(),
        "stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]},
        "stop_sequence": {"type": ["string", "null"]},
        "usage": obj({"input_tokens": INTEGER, "output_tokens": INTEGER}),
        "b3os": B3OS,
    },
    ("id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"),
    closed=False,
)
TOKEN_COUNT = obj({"input_tokens": INTEGER}, ("input_tokens",))


def _completion(kind: str) -> Schema:
    """A chat completion, or one chunk of its stream."""
    return obj(
        {
            "id": string(),
            "object": {"const": kind},
            "created": INTEGER,
            "model": string(),
            "choices": {"type": "array", "items": {"type": "object"}},
            "usage": {"type": "object"},
            "b3os": B3OS,
        },
        ("id", "object", "created", "model", "choices"),
        closed=False,
    )


COMPLETION, CHUNK = _completion("chat.completion"), _completion("chat.completion.chunk")
ANTHROPIC_EVENTS = (
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
)


def _json_data(schema: Schema) -> Schema:
    return {"type": "string", "contentMediaType": JSON, "contentSchema": schema}


def _anthropic_event(name: str) -> Schema:
    data = (
        ANTHROPIC_ERROR
        if name == "error"
        else obj({"type": {"const": name}}, ("type",), closed=False)
    )
    return obj(
        {"event": {"const": name}, "data": _json_data(data)}, ("event", "data"), closed=False
    )


# An event-stream schema describes one event, {event, data} (what OpenAPI 3.2 calls itemSchema).
ANTHROPIC_EVENT: Schema = {
    "description": "One Messages stream event: data is the JSON whose type is the event name; "
    "a failure after the head ends the stream with an error event.",
    "oneOf": [_anthropic_event(name) for name in ANTHROPIC_EVENTS],
}
OPENAI_EVENT = obj(
    {
        "event": {"const": "message"},
        "data": {
            "type": "string",
            "if": {"const": "[DONE]"},
            "else": _json_data({"anyOf": [CHUNK, OPENAI_ERROR]}),
        },
    },
    ("data",),
    closed=False,
    description="One chunk (or, after the head, an error) as JSON; the stream ends with [DONE].",
)
MODEL_LIST = obj(
    {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": obj(
                {
                    "id": string(),
                    "object": {"const": "model"},
                    "created": INTEGER,
                    "owned_by": string(),
                    "context_length": INTEGER,
                    "max_request_bytes": INTEGER,
                    "capabilities": {"type": "array", "items": string()},
                },
                ("id", "object", "context_length", "max_request_bytes", "capabilities"),
                closed=False,
            ),
        },
    },
    ("object", "data"),
)
REQUEST_ENTRY = obj(
    {
        "id": REQUEST_ID,
        "object": {"const": "infer.request"},
        "route": string(),
        "model": string(),
        "created": INTEGER,
        "status": {"enum": ["running", "succeeded", "failed", "canceled", "interrupted"]},
        "stream": {"type": "boolean"},
        "finish_reason": {"type": ["string", "null"]},
        "stop_sequence": {"type": ["string", "null"]},
        "error": {"anyOf": [obj({"code": string()}, ("code",)), {"type": "null"}]},
        "usage": obj(
            {"prompt_tokens": INTEGER, "completion_tokens": INTEGER, "cached_tokens": INTEGER},
            ("prompt_tokens", "completion_tokens", "cached_tokens"),
        ),
        "timing": {"type": "object", "additionalProperties": NUMBER},
        "duration_ms": {"type": ["number", "null"]},
    },
    ("id", "object", "route", "model", "created", "status", "usage", "timing"),
    closed=False,
)
READY = obj({"status": {"const": "ready"}, "running_requests": INTEGER}, ("status",))
NOT_READY = obj(
    {"status": {"enum": ["starting", "unavailable"]}, "running_requests": INTEGER}, ("status",)
)

# What each status means on the infer routes, and the headers it comes with.
INFER_ERRORS: dict[str, tuple[str, dict[str, Any]]] = {
    "400": (
        "The request is invalid (invalid_request, unsupported_parameter, "
        "context_length_exceeded), or its body is not JSON.",
        {},
    ),
    "401": ("Missing or invalid credentials (unauthorized, OpenAI shape).", WWW_AUTHENTICATE),
    "403": (
        "The key lacks the route's scope (forbidden, OpenAI shape), or the egress guard refused "
        "an image URL (egress_denied).",
        {},
    ),
    "404": ("The model is not served on this node (model_not_available).", {}),
    "413": ("The body exceeds max_request_bytes (payload_too_large, OpenAI shape).", {}),
    "415": ("The body is not JSON (unsupported_media_type).", {}),
    "429": (
        "A limit applies (rate_limited, concurrency_limited, quota_exceeded), with "
        "Retry-After where waiting helps and the RateLimit headers of the limit that refused.",
        {**RETRY_AFTER, **RATE_LIMIT},
    ),
    "500": ("Something failed inside the node (internal); the message names the request.", {}),
    "503": (
        "The model runtime is starting, restarting or down, or the gateway route is not set up "
        "here (infer_backend_unavailable), with Retry-After while it starts.",
        RETRY_AFTER,
    ),
}
KEY_ERRORS = {status: INFER_ERRORS[status] for status in ("401", "403")}
SECURITY: list[dict[str, list[str]]] = [{"apiKey": []}, {"xApiKey": []}]  # either; none if open

HELLO = {"model": SERVED_NAME, "messages": [{"role": "user", "content": "Say hello."}]}
# Request examples, on the embedded default model: what a client sends, streamed or not.
EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "createMessage": [{**HELLO, "max_tokens": 64}, {**HELLO, "max_tokens": 64, "stream": True}],
    "countTokens": [HELLO],
    "createChatCompletion": [
        {**HELLO, "max_completion_tokens": 64},
        {**HELLO, "stream": True, "stream_options": {"include_usage": True}},
    ],
}


def _content(schema: Schema, media_type: str = JSON) -> dict[str, Any]:
    return {media_type: {"schema": schema}}


def _response(description: str, content: dict[str, Any] | None = None, **headers: Any) -> Any:
    response: dict[str, Any] = {"description": description, "headers": {**HEADERS, **headers}}
    if content is not None:
        response["content"] = content
    return response


def _request(schema: Schema, operation_id: str) -> dict[str, Any]:
    examples = {
        ("stream" if example.get("stream") else "json"): {"value": example}
        for example in EXAMPLES[operation_id]
    }
    return {JSON: {"schema": schema, "examples": examples}}


def _errors(statuses: dict[str, tuple[str, dict[str, Any]]], shape: Schema) -> dict[str, Any]:
    return {
        status: _response(description, _content(shape), **headers)
        for status, (description, headers) in statuses.items()
    }


def _infer(
    operation_id: str,
    summary: str,
    request: Schema,
    ok: dict[str, Any],
    errors: dict[str, tuple[str, dict[str, Any]]],
    shape: Schema,
) -> dict[str, Any]:
    return {
        "post": {
            "operationId": operation_id,
            "summary": summary,
            "security": SECURITY,
            "requestBody": {"required": True, "content": _request(request, operation_id)},
            "responses": {"200": ok, **_errors(errors, shape)},
        }
    }


def _generation(answer: Schema, event: Schema) -> dict[str, Any]:
    content = {**_content(answer), **_content(event, EVENT_STREAM)}
    return _response(
        "The answer, or with stream: true its server-sent events.", content, **RATE_LIMIT
    )


def _get(operation_id: str, summary: str, responses: dict[str, Any], *, keyed: bool = False) -> Any:
    operation: dict[str, Any] = {"operationId": operation_id, "summary": summary}
    if keyed:
        operation["security"] = SECURITY
    return {"get": {**operation, "responses": responses}}


def _paths() -> dict[str, Any]:
    without = {key: value for key, value in INFER_ERRORS.items() if key != "429"}
    return {
        "/v1/infer/v1/messages": _infer(
            "createMessage",
            "Create a message (Anthropic Messages API)",
            MESSAGES_REQUEST,
            _generation(MESSAGE, ANTHROPIC_EVENT),
            INFER_ERRORS,
            MESSAGES_ERROR,
        ),
        "/v1/infer/v1/messages/count_tokens": _infer(
            "countTokens",
            "Count the tokens of a message request (free: no admission, so no 429)",
            COUNT_TOKENS_REQUEST,
            _response("The prompt's token count.", _content(TOKEN_COUNT)),
            without,
            MESSAGES_ERROR,
        ),
        "/v1/infer/chat/completions": _infer(
            "createChatCompletion",
            "Create a chat completion (OpenAI Chat Completions API)",
            CHAT_REQUEST,
            _generation(COMPLETION, OPENAI_EVENT),
            INFER_ERRORS,
            OPENAI_ERROR,
        ),
        "/v1/infer/models": _get(
            "listModels",
            "The models this node serves",
            {
                "200": _response("The served model's card.", _content(MODEL_LIST)),
                **_errors({**KEY_ERRORS, "500": INFER_ERRORS["500"]}, OPENAI_ERROR),
                "503": _response(
                    "The model runtime is starting (infer_backend_unavailable).",
                    _content(OPENAI_ERROR),
                    **RETRY_AFTER,
                ),
            },
            keyed=True,
        ),
        "/v1/requests/{request_id}": {
            "parameters": [
                {
                    "name": "request_id",
                    "in": "path",
                    "required": True,
                    "description": "The request ID, from x-request-id.",
                    "schema": REQUEST_ID,
                }
            ],
            **_get(
                "getRequest",
                "The request log entry of a recent request of the key's organization",
                {
                    "200": _response("The entry: status, phases, tokens.", _content(REQUEST_ENTRY)),
                    **_errors(KEY_ERRORS, OPENAI_ERROR),
                    "404": _response(
                        "No such request in this node's log for the organization (not_found).",
                        _content(OPENAI_ERROR),
                    ),
                    **_errors({"500": INFER_ERRORS["500"]}, OPENAI_ERROR),
                },
                keyed=True,
            ),
        },
        "/v1/infer": {
            "head": {
                "operationId": "probe",
                "summary": "The probe agents send to the base URL",
                "responses": {"200": _response("The base URL answers.")},
            }
        },
        "/healthz": _get(
            "healthz",
            "Liveness (the model may still be loading)",
            {"200": _response("Alive.", _content(obj({"status": {"const": "ok"}}, ("status",))))},
        ),
        "/readyz": _get(
            "readyz",
            "Readiness",
            {
                "200": _response("The model runtime answers requests.", _content(READY)),
                "503": _response("It is starting, or unavailable.", _content(NOT_READY)),
            },
        ),
        "/openapi.json": _get(
            "openapi",
            "This document",
            {"200": _response("The OpenAPI document.", _content({"type": "object"}))},
        ),
        "/metrics": _get(
            "metrics",
            "Prometheus metrics (text exposition format)",
            {"200": _response("The server's metrics.", _content(string(), "text/plain"))},
        ),
    }


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "b3os-infer", "version": __version__},
        "paths": _paths(),
        "components": {
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Authorization: Bearer b3os_sk_...; an open node (no key "
                    "store) takes requests without one",
                },
                "xApiKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "x-api-key",
                    "description": "The same key in x-api-key, as Anthropic SDKs send api_key",
                },
            }
        },
    }

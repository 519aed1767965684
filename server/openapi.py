"""The OpenAPI 3.1 document of this server's own routes, served at `GET /openapi.json`. Request
schemas come from the protocols' `schema.py`, which tests hold in step with the decoders."""

from __future__ import annotations

from typing import Any

from server import __version__
from server.protocols.anthropic.schema import COUNT_TOKENS_REQUEST, MESSAGES_REQUEST
from server.protocols.openai.schema import CHAT_REQUEST
from server.protocols.schema import Schema, obj, string

REQUEST_ID = {"type": "string", "pattern": "^req_[0-9a-hjkmnp-tv-z]{26}$"}
HEADERS = {
    "x-request-id": {"description": "The request ID.", "schema": REQUEST_ID},
    "request-id": {
        "description": "The request ID, as Anthropic SDKs read it.",
        "schema": REQUEST_ID,
    },
    "Server-Timing": {
        "description": "Phase durations in ms (template, ttft, model; total on JSON answers).",
        "schema": {"type": "string"},
    },
}
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
)
B3OS = obj(
    {
        "route": {"enum": ["local", "gateway"]},
        "node": string(),
        "timing": obj(
            {
                "ttft_ms": {"type": "number"},
                "model_ms": {"type": "number"},
                "total_ms": {"type": "number"},
            }
        ),
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
        "usage": obj({"input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}}),
        "b3os": B3OS,
    },
    ("id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"),
    closed=False,
)
COMPLETION = obj(
    {
        "id": string(),
        "object": {"const": "chat.completion"},
        "created": {"type": "integer"},
        "model": string(),
        "choices": {"type": "array", "items": {"type": "object"}},
        "usage": {"type": "object"},
        "b3os": B3OS,
    },
    ("id", "object", "created", "model", "choices"),
    closed=False,
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
                    "context_length": {"type": "integer"},
                    "max_request_bytes": {"type": "integer"},
                    "capabilities": {"type": "array", "items": string()},
                },
                closed=False,
            ),
        },
    },
    ("object", "data"),
)
ERRORS = {
    "400": "The request is invalid (invalid_request, unsupported_parameter, "
    "context_length_exceeded).",
    "404": "The model is not served on this node (model_not_available).",
    "413": "The body exceeds the model's max_request_bytes (payload_too_large, OpenAI shape).",
    "415": "The body is not JSON (unsupported_media_type).",
    "500": "Something failed inside the node (internal); the message names the request id.",
    "503": "The model runtime is starting, restarting or down (infer_backend_unavailable), "
    "with Retry-After.",
}


def _json(schema: Schema) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _infer(summary: str, request: Schema, answer: Schema, error: Schema) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {
            "description": "The answer, or with stream: true its server-sent events.",
            "headers": HEADERS,
            "content": {**_json(answer), "text/event-stream": {"schema": {"type": "string"}}},
        }
    }
    for status, description in ERRORS.items():
        shape = OPENAI_ERROR if status == "413" else error
        responses[status] = {
            "description": description,
            "headers": HEADERS,
            "content": _json(shape),
        }
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": _json(request)},
            "responses": responses,
        }
    }


def _get(summary: str, schema: Schema) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "responses": {"200": {"description": summary, "content": _json(schema)}},
        }
    }


def document() -> dict[str, Any]:
    count = obj({"input_tokens": {"type": "integer"}}, ("input_tokens",))
    return {
        "openapi": "3.1.0",
        "info": {"title": "b3os-infer", "version": __version__},
        "paths": {
            "/v1/infer/v1/messages": _infer(
                "Create a message (Anthropic Messages API)",
                MESSAGES_REQUEST,
                MESSAGE,
                ANTHROPIC_ERROR,
            ),
            "/v1/infer/v1/messages/count_tokens": _infer(
                "Count the tokens of a message request",
                COUNT_TOKENS_REQUEST,
                count,
                ANTHROPIC_ERROR,
            ),
            "/v1/infer/chat/completions": _infer(
                "Create a chat completion (OpenAI Chat Completions API)",
                CHAT_REQUEST,
                COMPLETION,
                OPENAI_ERROR,
            ),
            "/v1/infer/models": _get("The models this node serves", MODEL_LIST),
            "/v1/requests/{request_id}": _get(
                "The request log entry of a recent request", {"type": "object"}
            ),
            "/healthz": _get("Liveness", {"type": "object"}),
            "/readyz": _get("Readiness: 503 until the model runtime answers", {"type": "object"}),
            "/openapi.json": _get("This document", {"type": "object"}),
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (text exposition format)",
                    "responses": {
                        "200": {
                            "description": "The server's metrics",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "b3os_sk_ API key (x-api-key is also taken); none on an "
                    "open node",
                }
            }
        },
    }

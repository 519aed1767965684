"""The headers every response carries, the statuses the infer routes answer with their headers,
and the helpers that declare a response, its content and a set of error responses."""

from __future__ import annotations

from typing import Any

from server.openapi.schemas import INTEGER, JSON, REQUEST_ID
from server.protocols.schema import Schema, string

# status -> (what it means, the headers it comes with)
Statuses = dict[str, tuple[str, dict[str, Any]]]


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

# What each status means on the infer routes, and the headers it comes with.
INFER_ERRORS: Statuses = {
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


def content_of(schema: Schema, media_type: str = JSON) -> dict[str, Any]:
    return {media_type: {"schema": schema}}


def response(description: str, content: dict[str, Any] | None = None, **headers: Any) -> Any:
    declared: dict[str, Any] = {"description": description, "headers": {**HEADERS, **headers}}
    if content is not None:
        declared["content"] = content
    return declared


def error_responses(statuses: Statuses, shape: Schema) -> dict[str, Any]:
    return {
        status: response(description, content_of(shape), **headers)
        for status, (description, headers) in statuses.items()
    }

"""The operations of the OpenAPI document, path by path: request bodies with examples, and
every status each operation answers, in the shape it is rendered in."""

from __future__ import annotations

from typing import Any

from server.models.embedded import SERVED_NAME
from server.openapi.responses import (
    INFER_ERRORS,
    KEY_ERRORS,
    RATE_LIMIT,
    RETRY_AFTER,
    Statuses,
    content_of,
    error_responses,
    response,
)
from server.openapi.schemas import (
    ANTHROPIC_EVENT,
    COMPLETION,
    DELETED_RESPONSE,
    EVENT_STREAM,
    INPUT_ITEMS,
    INPUT_TOKENS,
    JSON,
    MESSAGE,
    MESSAGES_ERROR,
    MODEL_LIST,
    NOT_READY,
    OPENAI_ERROR,
    OPENAI_EVENT,
    READY,
    REQUEST_ENTRY,
    REQUEST_ID,
    RESPONSE,
    RESPONSES_EVENT,
    TOKEN_COUNT,
)
from server.protocols.anthropic.schema import COUNT_TOKENS_REQUEST, MESSAGES_REQUEST
from server.protocols.openai.schema import CHAT_REQUEST
from server.protocols.responses.schema import RESPONSES_REQUEST
from server.protocols.schema import Schema, obj, string

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
    "createResponse": [
        {"model": SERVED_NAME, "input": "Say hello.", "max_output_tokens": 64},
        {"model": SERVED_NAME, "input": "Say hello.", "stream": True},
    ],
    "countResponseInputTokens": [{"model": SERVED_NAME, "input": "Say hello."}],
}
# A kept response's routes: the key's organization's only; any other id is 404.
STORED_ERRORS: Statuses = {
    **KEY_ERRORS,
    "404": ("No such response kept for the key's organization (not_found).", {}),
    "500": INFER_ERRORS["500"],
}


def _request(schema: Schema, operation_id: str) -> dict[str, Any]:
    examples = {
        ("stream" if example.get("stream") else "json"): {"value": example}
        for example in EXAMPLES[operation_id]
    }
    return {JSON: {"schema": schema, "examples": examples}}


def _infer(
    operation_id: str,
    summary: str,
    request: Schema,
    ok: dict[str, Any],
    errors: Statuses,
    shape: Schema,
) -> dict[str, Any]:
    return {
        "post": {
            "operationId": operation_id,
            "summary": summary,
            "security": SECURITY,
            "requestBody": {"required": True, "content": _request(request, operation_id)},
            "responses": {"200": ok, **error_responses(errors, shape)},
        }
    }


def _generation(answer: Schema, event: Schema) -> dict[str, Any]:
    content = {**content_of(answer), **content_of(event, EVENT_STREAM)}
    return response(
        "The answer, or with stream: true its server-sent events.", content, **RATE_LIMIT
    )


def _get(operation_id: str, summary: str, responses: dict[str, Any], *, keyed: bool = False) -> Any:
    operation: dict[str, Any] = {"operationId": operation_id, "summary": summary}
    if keyed:
        operation["security"] = SECURITY
    return {"get": {**operation, "responses": responses}}


def _response_id() -> dict[str, Any]:
    return {
        "name": "response_id",
        "in": "path",
        "required": True,
        "description": "The response's id (resp_...).",
        "schema": string(),
    }


def _query(name: str, description: str, schema: Schema) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema}  # fmt: skip


def path_items() -> dict[str, Any]:
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
            response("The prompt's token count.", content_of(TOKEN_COUNT)),
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
        "/v1/infer/responses": _infer(
            "createResponse",
            "Create a response (OpenAI Responses API): kept unless store is false, and "
            "previous_response_id continues a kept one (400 previous_response_not_found when it is "
            "not kept for the key's organization)",
            RESPONSES_REQUEST,
            _generation(RESPONSE, RESPONSES_EVENT),
            INFER_ERRORS,
            OPENAI_ERROR,
        ),
        "/v1/infer/responses/input_tokens": _infer(
            "countResponseInputTokens",
            "Count the prompt tokens a response request would have (free: no admission)",
            RESPONSES_REQUEST,
            response("The prompt's token count.", content_of(INPUT_TOKENS)),
            without,
            OPENAI_ERROR,
        ),
        "/v1/infer/responses/{response_id}": {
            "parameters": [_response_id()],
            **_get(
                "getResponse",
                "A kept response",
                {
                    "200": response("The response object.", content_of(RESPONSE)),
                    **error_responses(STORED_ERRORS, OPENAI_ERROR),
                },
                keyed=True,
            ),
            "delete": {
                "operationId": "deleteResponse",
                "summary": "Delete a kept response",
                "security": SECURITY,
                "responses": {
                    "200": response("Deleted.", content_of(DELETED_RESPONSE)),
                    **error_responses(STORED_ERRORS, OPENAI_ERROR),
                },
            },
        },
        "/v1/infer/responses/{response_id}/input_items": {
            "parameters": [
                _response_id(),
                _query("after", "List the items after this item id.", string()),
                _query("limit", "How many items (1 to 100, default 20).", {"type": "integer"}),
                _query("order", "asc or desc (default: newest first).", string()),
                _query("include", "Accepted; the items are listed whole.", string()),
            ],
            **_get(
                "listResponseInputItems",
                "The conversation a kept response answered, as items (the turns it continued "
                "included)",
                {
                    "200": response("A page of items.", content_of(INPUT_ITEMS)),
                    **error_responses(
                        {"400": ("A bad limit, order or after (invalid_request).", {})},
                        OPENAI_ERROR,
                    ),
                    **error_responses(STORED_ERRORS, OPENAI_ERROR),
                },
                keyed=True,
            ),
        },
        "/v1/infer/models": _get(
            "listModels",
            "The models this node serves",
            {
                "200": response("The served model's card.", content_of(MODEL_LIST)),
                **error_responses({**KEY_ERRORS, "500": INFER_ERRORS["500"]}, OPENAI_ERROR),
                "503": response(
                    "The model runtime is starting (infer_backend_unavailable).",
                    content_of(OPENAI_ERROR),
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
                    "200": response(
                        "The entry: status, phases, tokens.", content_of(REQUEST_ENTRY)
                    ),
                    **error_responses(KEY_ERRORS, OPENAI_ERROR),
                    "404": response(
                        "No such request in this node's log for the organization (not_found).",
                        content_of(OPENAI_ERROR),
                    ),
                    **error_responses({"500": INFER_ERRORS["500"]}, OPENAI_ERROR),
                },
                keyed=True,
            ),
        },
        "/v1/infer": {
            "head": {
                "operationId": "probe",
                "summary": "The probe agents send to the base URL",
                "responses": {"200": response("The base URL answers.")},
            }
        },
        "/healthz": _get(
            "healthz",
            "Liveness (the model may still be loading)",
            {"200": response("Alive.", content_of(obj({"status": {"const": "ok"}}, ("status",))))},
        ),
        "/readyz": _get(
            "readyz",
            "Readiness",
            {
                "200": response("The model runtime answers requests.", content_of(READY)),
                "503": response("It is starting, or unavailable.", content_of(NOT_READY)),
            },
        ),
        "/openapi.json": _get(
            "openapi",
            "This document",
            {"200": response("The OpenAPI document.", content_of({"type": "object"}))},
        ),
        "/metrics": _get(
            "metrics",
            "Prometheus metrics (text exposition format)",
            {"200": response("The server's metrics.", content_of(string(), "text/plain"))},
        ),
    }

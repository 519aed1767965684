"""The reusable JSON-schema pieces of the OpenAPI document and the component schemas of what
the routes answer: error bodies, messages, completions, stream events, models, log entries."""

from __future__ import annotations

from server.protocols.schema import Schema, obj, string

JSON, EVENT_STREAM = "application/json", "text/event-stream"
INTEGER: Schema = {"type": "integer"}
NUMBER: Schema = {"type": "number"}
REQUEST_ID = string(pattern="^req_[0-9a-hjkmnp-tv-z]{26}$")

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
        "usage": obj(
            {
                "input_tokens": {
                    **INTEGER,
                    "description": "The prompt's tokens not read from the prefix cache, as "
                    "Anthropic counts them: with the two cache counts, the whole prompt.",
                },
                "cache_creation_input_tokens": {
                    **INTEGER,
                    "description": "Always 0: the runtime caches every prefix it computes on its "
                    "own, no request writes to the cache.",
                },
                "cache_read_input_tokens": {
                    **INTEGER,
                    "description": "The prompt's tokens read from the prefix cache.",
                },
                "output_tokens": INTEGER,
            },
            ("input_tokens", "output_tokens"),
        ),
        "b3os": B3OS,
    },
    ("id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"),
    closed=False,
)
TOKEN_COUNT = obj({"input_tokens": INTEGER}, ("input_tokens",))
RESPONSE_ID = string(pattern="^resp_[0-9a-hjkmnp-tv-z]{26}$")
INPUT_TOKENS = obj(
    {"object": {"const": "response.input_tokens"}, "input_tokens": INTEGER},
    ("object", "input_tokens"),
)
INPUT_ITEMS = obj(
    {
        "object": {"const": "list"},
        "data": {"type": "array", "items": {"type": "object"}},
        "first_id": {"type": ["string", "null"]},
        "last_id": {"type": ["string", "null"]},
        "has_more": {"type": "boolean"},
    },
    ("object", "data", "first_id", "last_id", "has_more"),
)
DELETED_RESPONSE = obj(
    {"id": string(), "object": {"const": "response"}, "deleted": {"const": True}},
    ("id", "object", "deleted"),
)


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
RESPONSE = obj(
    {
        "id": RESPONSE_ID,
        "object": {"const": "response"},
        "created_at": INTEGER,
        "status": {"enum": ["in_progress", "completed", "incomplete", "failed"]},
        "error": {"type": ["object", "null"]},
        "incomplete_details": {"type": ["object", "null"]},
        "model": string(),
        "output": {"type": "array", "items": {"type": "object"}},
        "usage": {"type": ["object", "null"]},
        "b3os": B3OS,
    },
    ("id", "object", "created_at", "status", "model", "output"),
    closed=False,
)
RESPONSES_EVENT = obj(
    {
        "event": string(),
        "data": _json_data(
            obj({"type": string(), "sequence_number": INTEGER}, ("type",), closed=False)
        ),
    },
    ("event", "data"),
    closed=False,
    description="One Responses stream event: event is the data's type (response.created, "
    "response.output_text.delta, ..., response.completed or response.incomplete); a failure "
    "after the head is an error event, then response.failed.",
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
                    "max_output_tokens": INTEGER,
                    "max_request_bytes": INTEGER,
                    "capabilities": {"type": "array", "items": string()},
                    "family": string(),
                    "tool_format": {"type": ["string", "null"]},
                    "reasoning": {"type": "boolean"},
                    "reasoning_parser": {"type": ["string", "null"]},
                    "protocols": {
                        "type": "array",
                        "items": {"enum": ["messages", "chat.completions", "responses"]},
                    },
                    "route": {"enum": ["local", "gateway"]},
                },
                ("id", "object", "route"),
                closed=False,
                description="The served model (route local, with its limits), then the models "
                "the B3IQ gateway route is set up for (route gateway: chat completions with "
                '"route": "gateway").',
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
        "served_by": {"enum": ["local", "gateway"]},
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

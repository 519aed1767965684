"""The Messages request as JSON Schema, as the contract publishes it (and decode.py enforces)."""
# Unions are anyOf over members told apart by their "type" constant: each body matches one.

from __future__ import annotations

from server.protocols.rules import IMAGE_MEDIA_TYPES
from server.protocols.schema import (
    ANY_OBJECT,
    BOOLEAN,
    JSON_SCHEMA,
    Schema,
    array,
    const,
    enum,
    integer,
    nullable,
    number,
    obj,
    string,
)

CACHE_CONTROL = nullable(
    obj({"type": string(), "ttl": string()}, closed=False, description="Accepted and ignored.")
)
TEXT = obj(
    {
        "type": const("text"),
        "text": string(),
        "cache_control": CACHE_CONTROL,
        "citations": array(ANY_OBJECT),
    },
    ("type", "text"),
)
IMAGE = obj(
    {
        "type": const("image"),
        "source": {
            "anyOf": [
                obj(
                    {
                        "type": const("base64"),
                        "media_type": enum(*IMAGE_MEDIA_TYPES),
                        "data": string(contentEncoding="base64"),
                    },
                    ("type", "media_type", "data"),
                ),
                obj({"type": const("url"), "url": string(pattern="^https://")}, ("type", "url")),
            ]
        },
        "cache_control": CACHE_CONTROL,
    },
    ("type", "source"),
)
TOOL_RESULT = obj(
    {
        "type": const("tool_result"),
        "tool_use_id": string(),
        "content": {
            "anyOf": [{"type": ["string", "null"]}, array({"anyOf": [TEXT, IMAGE]}, null=False)]
        },
        "is_error": BOOLEAN,
        "cache_control": CACHE_CONTROL,
    },
    ("type", "tool_use_id"),
)
TOOL_USE = obj(
    {
        "type": const("tool_use"),
        "id": string(minLength=1),
        "name": string(),
        "input": ANY_OBJECT,
        "cache_control": CACHE_CONTROL,
    },
    ("type", "id", "name", "input"),
)
THINKING_BLOCK = obj(
    {"type": const("thinking"), "thinking": string(), "signature": {"type": ["string", "null"]}},
    ("type", "thinking"),
)
REDACTED_THINKING = obj(
    {"type": const("redacted_thinking"), "data": string()},
    ("type", "data"),
    description="Accepted in assistant turns and left out of the prompt.",
)


def _message(role: str, blocks: list[Schema], description: str = "") -> Schema:
    content = {"anyOf": [string(), array({"anyOf": blocks}, null=False)]}
    return obj(
        {"role": const(role), "content": content}, ("role", "content"), description=description
    )


USER = _message("user", [TEXT, IMAGE, TOOL_RESULT])
ASSISTANT = _message(
    "assistant",
    [TEXT, TOOL_USE, THINKING_BLOCK, REDACTED_THINKING],
    "An earlier answer; as the last message, the start of the answer, which the model continues.",
)
TOOL = obj(
    {
        "type": enum("custom", None),
        "name": string(pattern="^[A-Za-z0-9_-]{1,128}$"),
        "description": {"type": ["string", "null"]},
        "input_schema": JSON_SCHEMA,
        "strict": BOOLEAN,
        "cache_control": CACHE_CONTROL,
        # Hints that change nothing here: taken. Examples are shown to the model.
        "eager_input_streaming": BOOLEAN,
        "input_examples": array(ANY_OBJECT),
        "allowed_callers": array(enum("direct")),
        "defer_loading": {"enum": [False, None]},
    },
    ("name", "input_schema"),
    description="A custom tool; tools Anthropic defines or runs are unsupported_parameter, as "
    "are callers other than direct and defer_loading: true (taken with --compat claude-code).",
)
TOOL_CHOICE = nullable(
    {
        "anyOf": [
            obj({"type": enum("auto", "any"), "disable_parallel_tool_use": BOOLEAN}, ("type",)),
            obj(
                {"type": const("tool"), "name": string(), "disable_parallel_tool_use": BOOLEAN},
                ("type", "name"),
            ),
            obj({"type": const("none")}, ("type",)),
        ]
    }
)
DISPLAY = enum("summarized", "omitted", "updates", None)
THINKING = nullable(
    {
        "anyOf": [
            obj(
                {
                    "type": const("enabled"),
                    "budget_tokens": integer(1024, null=False),
                    "display": DISPLAY,
                },
                ("type", "budget_tokens"),
            ),
            obj({"type": const("adaptive"), "display": DISPLAY}, ("type",)),
            obj({"type": const("disabled")}, ("type",)),
        ]
    }
)
OUTPUT_CONFIG = nullable(
    obj(
        {
            "format": nullable(
                obj({"type": const("json_schema"), "schema": JSON_SCHEMA}, ("type", "schema"))
            ),
            "effort": enum("low", "medium", "high", "xhigh", "max", None),
        }
    )
)
SYSTEM = {"anyOf": [{"type": ["string", "null"]}, array(TEXT, null=False)]}
_CONVERSATION: dict[str, Schema] = {
    "model": string(minLength=1, maxLength=256),
    "messages": array({"anyOf": [USER, ASSISTANT]}, null=False, min_items=1),
    "system": SYSTEM,
    "tools": array(TOOL),
    "tool_choice": TOOL_CHOICE,
    "thinking": THINKING,
    "output_config": OUTPUT_CONFIG,
    "metadata": nullable(obj({"user_id": {"type": ["string", "null"]}}, closed=False)),
    "service_tier": {"type": ["string", "null"]},
    "context_management": nullable(ANY_OBJECT),
    # Caching and speed hints and cache diagnostics: accepted and ignored.
    "cache_control": CACHE_CONTROL,
    "speed": enum("standard", "fast", None),
    "diagnostics": nullable(ANY_OBJECT),
}
MESSAGES_REQUEST = obj(
    {
        **_CONVERSATION,
        "max_tokens": integer(1, null=False),
        "stop_sequences": array(string(minLength=1)),
        "stream": BOOLEAN,
        "temperature": number(0, 1),
        "top_p": number(0, 1),
        "top_k": integer(1, 1_000_000),
    },
    ("model", "messages", "max_tokens"),
    description="Anthropic Messages parameters. Any other parameter is 400 "
    "unsupported_parameter; null means unset.",
)
COUNT_TOKENS_REQUEST = obj(
    _CONVERSATION,
    ("model", "messages"),
    description="The request a Messages call would make, without max_tokens and sampling.",
)

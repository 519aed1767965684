"""The Chat Completions request as JSON Schema, as the contract publishes it (and decode.py
enforces)."""

from __future__ import annotations

from server.protocols.schema import (
    ANY_OBJECT,
    BOOLEAN,
    JSON_SCHEMA,
    array,
    const,
    enum,
    integer,
    nullable,
    number,
    obj,
    string,
)

NAME = string(pattern="^[A-Za-z0-9_-]{1,64}$")
TEXT_PART = obj({"type": const("text"), "text": string()}, ("type", "text"))
IMAGE_PART = obj(
    {
        "type": const("image_url"),
        "image_url": obj(
            {
                "url": string(pattern="^(https://|data:image/(png|jpeg|jpg|webp|gif);base64,)"),
                "detail": enum("auto", "low", "high"),
            },
            ("url",),
        ),
    },
    ("type", "image_url"),
)
TOOL_CALL = obj(
    {
        "id": string(),
        "type": const("function"),
        "function": obj({"name": string(), "arguments": string()}, ("name", "arguments")),
    },
    ("id", "type", "function"),
)
MESSAGE = obj(
    {
        "role": enum("system", "developer", "user", "assistant", "tool"),
        "content": {
            "anyOf": [
                {"type": ["string", "null"]},
                array({"anyOf": [TEXT_PART, IMAGE_PART]}, null=False),
            ]
        },
        "name": {"type": ["string", "null"]},
        "tool_calls": array(TOOL_CALL),
        "tool_call_id": {"type": ["string", "null"]},
        "refusal": {"type": ["string", "null"]},
        "reasoning_content": {"type": ["string", "null"]},
    },
    ("role",),
    closed=False,
    description="Only assistant messages may have null content; images go only in user "
    "messages. Members not listed (annotations, audio echoed from a response) are ignored.",
)
TOOL = obj(
    {
        "type": const("function"),
        "function": obj(
            {
                "name": NAME,
                "description": string(),
                "parameters": JSON_SCHEMA,
                "strict": {"type": "boolean"},
            },
            ("name",),
        ),
    },
    ("type", "function"),
)
TOOL_CHOICE = {
    "anyOf": [
        enum("none", "auto", "required", None),
        obj(
            {"type": const("function"), "function": obj({"name": string()}, ("name",))},
            ("type", "function"),
        ),
    ]
}
RESPONSE_FORMAT = nullable(
    {
        "anyOf": [
            obj({"type": const("text")}, ("type",)),
            obj({"type": const("json_object")}, ("type",)),
            obj(
                {
                    "type": const("json_schema"),
                    "json_schema": obj(
                        {
                            "name": NAME,
                            "description": string(),
                            "schema": JSON_SCHEMA,
                            "strict": {"type": "boolean"},
                        },
                        ("name",),
                    ),
                },
                ("type", "json_schema"),
            ),
        ]
    }
)
CHAT_REQUEST = obj(
    {
        "model": string(minLength=1, maxLength=256),
        "messages": array(MESSAGE, null=False, min_items=1),
        "tools": array(TOOL),
        "tool_choice": TOOL_CHOICE,
        "parallel_tool_calls": BOOLEAN,
        "response_format": RESPONSE_FORMAT,
        "temperature": number(0, 2),
        "top_p": number(0, 1),
        "max_tokens": integer(1),
        "max_completion_tokens": integer(1),
        "stop": {"anyOf": [{"type": ["string", "null"]}, array(string(minLength=1), null=False)]},
        "seed": integer(),
        "n": integer(1, 1),
        "presence_penalty": number(-2, 2),
        "frequency_penalty": number(-2, 2),
        "logprobs": BOOLEAN,
        "top_logprobs": integer(0, 20),
        "user": {"type": ["string", "null"]},
        "stream": BOOLEAN,
        "stream_options": nullable(obj({"include_usage": BOOLEAN})),
        "route": enum("local", "gateway", None),
        "top_k": integer(-1, 1_000_000),
        "min_p": number(0, 1),
        "repetition_penalty": number(0, 2),
        "logit_bias": nullable(
            {
                "type": "object",
                "propertyNames": {"pattern": "^[0-9]{1,9}$"},
                "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
            }
        ),
        "chat_template_kwargs": nullable(obj({"enable_thinking": {"type": "boolean"}})),
        "metadata": nullable(ANY_OBJECT),
        "store": BOOLEAN,
        "service_tier": {"type": ["string", "null"]},
    },
    ("model", "messages"),
    description="OpenAI Chat Completions parameters, the runtime extensions this node takes, "
    "and route. Any other parameter is 400 unsupported_parameter; null means unset.",
)

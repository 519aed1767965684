"""The Responses request as JSON Schema, as the node publishes it (and decode.py enforces)."""

from __future__ import annotations

from server.protocols.responses.decode import INCLUDABLE, REASONING_BUDGETS
from server.protocols.responses.tools import HOSTED_TOOLS, MAX_DEFINITION
from server.protocols.schema import (
    BOOLEAN,
    JSON_SCHEMA,
    Schema,
    array,
    const,
    enum,
    integer,
    number,
    obj,
    string,
)

NAME = string(pattern="^[A-Za-z0-9_-]{1,64}$")
STATUS = enum("in_progress", "completed", "incomplete")
INPUT_TEXT = obj({"type": const("input_text"), "text": string()}, ("type", "text"))
INPUT_IMAGE = obj(
    {
        "type": const("input_image"),
        "image_url": string(pattern="^(https://|data:image/(png|jpeg|jpg|webp|gif);base64,)"),
        "detail": enum("auto", "low", "high"),
        "file_id": {"type": "null"},
    },
    ("type", "image_url"),
)
OUTPUT_TEXT = obj(
    {
        "type": const("output_text"),
        "text": string(),
        "annotations": array({}),
        "logprobs": array({}),
    },
    ("type", "text"),
)
REFUSAL = obj({"type": const("refusal"), "refusal": string()}, ("type", "refusal"))


def _message(roles: tuple[str, ...], parts: tuple[Schema, ...]) -> Schema:
    return obj(
        {
            "type": const("message"),
            "role": enum(*roles),
            "content": {"anyOf": [string(), array({"anyOf": list(parts)}, null=False)]},
            "id": string(),
            "status": STATUS,
        },
        ("role", "content"),
    )


CALLER = obj({"type": const("direct")}, ("type",))


def _call(kind: str, payload: str) -> Schema:
    """A function call (JSON `arguments`) or a custom tool call (free-form `input`)."""
    return obj(
        {
            "type": const(kind),
            "call_id": string(minLength=1),
            "name": string(minLength=1),
            payload: string(),
            "namespace": string(),
            "caller": CALLER,
            "id": string(),
            "status": STATUS,
        },
        ("type", "call_id", "name", payload),
    )


def _output(kind: str) -> Schema:
    return obj(
        {
            "type": const(kind),
            "call_id": string(minLength=1),
            "output": {
                "anyOf": [string(), array({"anyOf": [INPUT_TEXT, INPUT_IMAGE]}, null=False)]
            },
            "name": string(),
            "namespace": string(),
            "caller": CALLER,
            "id": string(),
            "status": STATUS,
        },
        ("type", "call_id", "output"),
    )


ITEM = {
    "anyOf": [
        _message(("user",), (INPUT_TEXT, INPUT_IMAGE)),
        _message(("system", "developer"), (INPUT_TEXT,)),
        _message(("assistant",), (OUTPUT_TEXT, REFUSAL)),
        _call("function_call", "arguments"),
        _call("custom_tool_call", "input"),
        _output("function_call_output"),
        _output("custom_tool_call_output"),
        obj(
            {
                "type": const("reasoning"),
                "summary": array(
                    obj({"type": const("summary_text"), "text": string()}, ("type", "text"))
                ),
                "content": array(
                    obj({"type": const("reasoning_text"), "text": string()}, ("type", "text"))
                ),
                "encrypted_content": string(),
                "id": string(),
                "status": STATUS,
            },
            ("type",),
        ),
    ],
    "description": "A message (type may be left out), or an item of an earlier answer sent "
    "back: function_call, custom_tool_call, their outputs, reasoning.",
}
# Taken as sent; true (tool search) and callers other than the model are refused.
_DEFERRAL = {"defer_loading": {"enum": [False, None]}, "allowed_callers": array(enum("direct"))}
FUNCTION_TOOL = obj(
    {
        "type": const("function"),
        "name": NAME,
        "description": string(),
        "parameters": JSON_SCHEMA,
        "strict": BOOLEAN,
        "output_schema": {"type": ["object", "null"]},
        **_DEFERRAL,
    },
    ("type", "name"),
)
CUSTOM_TOOL = obj(
    {
        "type": const("custom"),
        "name": NAME,
        "description": string(),
        "format": {
            "anyOf": [
                obj({"type": const("text")}, ("type",)),
                obj(
                    {
                        "type": const("grammar"),
                        "syntax": enum("lark", "regex"),
                        "definition": string(minLength=1, maxLength=MAX_DEFINITION),
                    },
                    ("type", "syntax", "definition"),
                ),
            ]
        },
        **_DEFERRAL,
    },
    ("type", "name"),
    description="Free-form input: any text, or text the grammar (Lark or a regular "
    "expression, compiled by xgrammar) holds it to; one that cannot be compiled is a 400.",
)
TOOL = {
    "anyOf": [
        FUNCTION_TOOL,
        CUSTOM_TOOL,
        obj(
            {
                "type": const("namespace"),
                "name": NAME,
                "description": string(),
                "tools": array({"anyOf": [FUNCTION_TOOL, CUSTOM_TOOL]}, null=False),
            },
            ("type", "name", "description", "tools"),
            description="Function and custom tools under a name: a call comes back with its "
            "namespace.",
        ),
    ],
    "description": f"OpenAI's hosted tools ({', '.join(HOSTED_TOOLS)}) are refused by name, "
    "or left out of what the model sees with --compat codex.",
}
TOOL_CHOICE = {
    "anyOf": [
        enum("none", "auto", "required", None),
        obj({"type": const("function"), "name": string()}, ("type", "name")),
        obj({"type": const("custom"), "name": string()}, ("type", "name")),
    ]
}
TEXT_FORMAT = {
    "anyOf": [
        obj({"type": const("text")}, ("type",)),
        obj({"type": const("json_object")}, ("type",)),
        obj(
            {
                "type": const("json_schema"),
                "name": NAME,
                "schema": JSON_SCHEMA,
                "description": string(),
                "strict": BOOLEAN,
            },
            ("type", "name", "schema"),
        ),
    ]
}
RESPONSES_REQUEST = obj(
    {
        "model": string(minLength=1, maxLength=256),
        "input": {
            "anyOf": [string(), array(ITEM, null=False, min_items=1)],
        },
        "instructions": {"type": ["string", "null"]},
        "tools": array(TOOL),
        "tool_choice": TOOL_CHOICE,
        "parallel_tool_calls": BOOLEAN,
        "text": obj({"format": TEXT_FORMAT, "verbosity": enum("low", "medium", "high")}),
        "reasoning": obj(
            {
                "effort": enum("none", *REASONING_BUDGETS),
                "summary": enum("auto", "concise", "detailed"),
                "generate_summary": enum("auto", "concise", "detailed"),
            }
        ),
        "max_output_tokens": integer(1),
        "temperature": number(0, 2),
        "top_p": number(0, 1),
        "top_logprobs": integer(0, 20),
        "include": array(enum(*INCLUDABLE)),
        "stream": BOOLEAN,
        "stream_options": obj({"include_obfuscation": BOOLEAN}),
        "store": {"type": ["boolean", "null"]},
        "background": {"enum": [False, None]},
        "truncation": enum("disabled", None),
        "metadata": {
            "type": ["object", "null"],
            "maxProperties": 16,
            "propertyNames": {"maxLength": 64},
            "additionalProperties": string(maxLength=512),
        },
        "user": {"type": ["string", "null"]},
        "safety_identifier": {"type": ["string", "null"]},
        "prompt_cache_key": {"type": ["string", "null"]},
        # What a client says about itself (Codex CLI sends it on every request): ignored.
        "client_metadata": {"type": ["object", "null"]},
        "service_tier": enum("auto", "default", "flex", "priority", None),
        "previous_response_id": {"type": ["string", "null"], "minLength": 1},
        # Need state this node does not keep: only null (unset) is taken.
        "conversation": {"type": "null"},
        "prompt": {"type": "null"},
        "max_tool_calls": {"type": "null"},
    },
    ("model", "input"),
    description="OpenAI Responses parameters this node takes. It keeps each response unless "
    "store is false, and previous_response_id continues a kept one; conversation, prompt and "
    "background: true are 400 unsupported_parameter, as is any parameter not listed; null "
    "means unset.",
)

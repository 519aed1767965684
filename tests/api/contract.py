"""Request bodies for the contract tables: a valid base request per protocol, changed one member
at a time."""

from __future__ import annotations

import base64
import copy
import os
from dataclasses import dataclass, field
from typing import Any

# The model the session server serves: the embedded one, unless a GPU check names another.
MODEL = os.environ.get("B3OS_TEST_SERVED_MODEL", "b3os/smollm2-135m-instruct")
# A prompt past the embedded model's 32,768-token window: a token a word.
TOO_LONG_FOR_THE_WINDOW = [{"role": "user", "content": "hello " * 40_000}]
# One white pixel, a real PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4//8/AAX+Av4N70a4AAAAAElFTkSuQmCC"
)
PNG_B64 = base64.b64encode(PNG).decode()
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CHAT_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def whole_prompt(usage: Any) -> int:
    """A Messages answer's prompt tokens: Anthropic counts those read from the cache apart from
    `input_tokens` (a wire dict or an SDK object)."""
    read = usage.get if isinstance(usage, dict) else lambda name: getattr(usage, name, None)
    names = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return sum(int(read(name) or 0) for name in names)


def deep_schema(levels: int) -> dict[str, Any]:
    """A JSON Schema nested `levels` deep (objects in properties)."""
    schema: dict[str, Any] = {"type": "string"}
    while _depth(schema) < levels:
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def big_schema(size: int) -> dict[str, Any]:
    return {"type": "object", "description": "x" * size}


def messages_body(**members: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    body.update(members)
    return body


def chat_body(**members: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    body.update(members)
    return body


def without(body: dict[str, Any], key: str) -> dict[str, Any]:
    body = copy.deepcopy(body)
    del body[key]
    return body


def user(*blocks: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


@dataclass(frozen=True)
class Refusal:
    """A request the contract refuses, and how: status, B3OS code, offending parameter."""

    name: str
    body: dict[str, Any]
    status: int
    code: str
    param: str | None
    message_has: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name

"""OpenAI chat `messages` -> canonical messages. Members a message may carry but the contract
does not list (`annotations`, `audio` echoed from a response) are ignored."""

from __future__ import annotations

from typing import Any

from server.canonical import Image, Message, Part, Role, Text, Thinking, ToolCall, ToolResult
from server.errors import InvalidRequest
from server.protocols.fields import Fields, describe
from server.protocols.rules import data_url, https_url

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
_LISTED = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "reasoning_content"}
)


def messages(fields: Fields) -> tuple[Message, ...]:
    items = list(fields.items("messages", required=True))
    if not items:
        raise InvalidRequest("messages must have at least one message", param="messages")
    return tuple(_message(path, item) for path, item in items)


def _message(path: str, item: Any) -> Message:
    fields = Fields(item, path)
    role_name = fields.choice("role", tuple(_ROLES), required=True)
    role = _ROLES[role_name]
    fields.string("name")  # ChatML has no speaker names: accepted, not rendered
    fields.string("refusal")
    parts = _content(fields, role)
    calls = _tool_calls(fields)
    # Each listed member is taken on every role, as the contract's schema has it, and used
    # where it means something: tool_call_id on tool messages, reasoning and calls on assistant.
    reasoning = fields.string("reasoning_content")
    fields.ignore(*(key for key in item if key not in _LISTED))
    if role == "tool":
        call_id = fields.string("tool_call_id", required=True)
        fields.done()
        texts = tuple(p for p in parts if isinstance(p, Text))
        return Message("tool", (ToolResult(call_id, texts),))
    fields.string("tool_call_id")
    fields.done()
    if role != "assistant":
        return Message(role, parts)
    thinking: tuple[Part, ...] = (Thinking(reasoning),) if reasoning else ()
    return Message(role, thinking + parts + calls)


def _content(fields: Fields, role: Role) -> tuple[Part, ...]:
    path = f"{fields.path}.content"
    content = fields.raw("content")
    if content is None:
        if role != "assistant":
            raise InvalidRequest(
                f"{path} is required on {role} messages; only assistant messages may have null "
                "content",
                param=path,
            )
        return ()
    if isinstance(content, str):
        return (Text(content),)
    if not isinstance(content, list):
        raise InvalidRequest(
            f"{path} must be a string or an array of parts, not {describe(content)}", param=path
        )
    return tuple(_part(f"{path}.{i}", part, role) for i, part in enumerate(content))


def _part(path: str, part: Any, role: Role) -> Text | Image:
    fields = Fields(part, path)
    kind = fields.choice("type", ("text", "image_url"), required=True)
    if kind == "image_url":
        if role != "user":
            raise InvalidRequest(
                f"{path}.type: images go only in user messages", param=f"{path}.type"
            )
        return _image(fields)
    text = fields.string("text", required=True)
    fields.done()
    return Text(text)


def _image(fields: Fields) -> Image:
    image_url = fields.object("image_url", required=True)
    url = image_url.string("url", required=True)
    image_url.choice("detail", ("auto", "low", "high"))
    image_url.done()
    fields.done()
    where = f"{image_url.path}.url"
    if url.startswith("data:"):
        media_type, data = data_url(url, where)
        return Image(fields.path, media_type, data)
    return Image(fields.path, url=https_url(url, where))


def _tool_calls(fields: Fields) -> tuple[ToolCall, ...]:
    calls = []
    for path, item in fields.items("tool_calls"):
        call = Fields(item, path)
        call_id = call.string("id", required=True)
        call.choice("type", ("function",), required=True)
        function = call.object("function", required=True)
        name = function.string("name", required=True)
        arguments = function.string("arguments", required=True)
        function.done()
        call.done()
        calls.append(ToolCall(call_id, name, arguments))
    return tuple(calls)

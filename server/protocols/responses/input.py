"""Responses `instructions` and `input` -> canonical messages. `input` is the whole conversation
(a request continuing a kept response has that response's items put before its own by the
route): messages, and the items of earlier answers sent back as they came (reasoning, function
and custom tool calls, their outputs), which join the assistant turn they belong to. A call
inside a namespace is the model's `namespace.name`."""

from __future__ import annotations

from typing import Any

from server.canonical import Image, Message, Part, Role, Text, Thinking, ToolCall, ToolResult
from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.fields import Fields, describe
from server.protocols.rules import data_url, https_url

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
ITEM_TYPES = (
    "message", "function_call", "function_call_output", "custom_tool_call",
    "custom_tool_call_output", "reasoning",
)  # fmt: skip
# Parts each role may send: what clients write, and what an earlier answer held.
_PARTS: dict[Role, tuple[str, ...]] = {
    "system": ("input_text",),
    "user": ("input_text", "input_image"),
    "assistant": ("output_text", "refusal"),
}
_STATUSES = ("in_progress", "completed", "incomplete")
STATELESS = (
    "this node keeps no conversation objects; send the whole conversation as input, or "
    "continue a stored response with previous_response_id"
)


def conversation(fields: Fields) -> tuple[Message, ...]:
    """`instructions` first (a system turn), then `input`: a string is one user turn."""
    found: list[Message] = []
    instructions = fields.string("instructions")
    if instructions:
        found.append(Message("system", (Text(instructions),)))
    value = fields.raw("input", required=True)
    if isinstance(value, str):
        found.append(Message("user", (Text(value),)))
        return tuple(found)
    if not isinstance(value, list):
        raise InvalidRequest(
            f"input must be a string or an array of items, not {describe(value)}", param="input"
        )
    if not value:
        raise InvalidRequest("input must have at least one item", param="input")
    for path, item in fields.items("input"):
        _item(found, path, item)
    if not found:  # reasoning items without text only: nothing to render
        raise InvalidRequest("input has no message or call to answer", param="input")
    return tuple(found)


def _item(found: list[Message], path: str, item: Any) -> None:
    fields = Fields(item, path)
    kind = fields.string("type") or "message"  # a message may leave its type out
    if kind == "item_reference":
        raise UnsupportedParameter(
            f"{path}: item references need stored items; {STATELESS}", param=f"{path}.type"
        )
    if kind not in ITEM_TYPES:
        raise UnsupportedParameter(
            f"{path}.type: {kind} items are not taken on this node (it takes "
            f"{', '.join(ITEM_TYPES)})",
            param=f"{path}.type",
        )
    fields.string("id")  # the id an earlier answer gave the item: not needed
    fields.choice("status", _STATUSES)
    if kind == "message":
        role = _ROLES[fields.choice("role", tuple(_ROLES), required=True)]
        parts: tuple[Part, ...] = _parts(fields, "content", _PARTS[role])
        fields.done()
        if role == "assistant":
            _assistant(found, parts)
        else:
            found.append(Message(role, parts))
    elif kind in ("function_call", "custom_tool_call"):
        custom = kind == "custom_tool_call"
        call_id = fields.string("call_id", required=True, min_length=1)
        name = fields.string("name", required=True, min_length=1)
        namespace = fields.string("namespace")
        arguments = fields.string("input" if custom else "arguments", required=True)
        _caller(fields)
        fields.done()
        name = f"{namespace}.{name}" if namespace else name
        _assistant(found, (ToolCall(call_id, name, arguments, free_form=custom),))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        call_id = fields.string("call_id", required=True, min_length=1)
        output = _parts(fields, "output", ("input_text", "input_image"))
        fields.string("name")  # the tool's, which the call it answers names already
        fields.string("namespace")
        _caller(fields)
        fields.done()
        found.append(Message("tool", (ToolResult(call_id, output),)))
    else:
        text = _reasoning(fields)
        fields.done()
        if text:
            _assistant(found, (Thinking(text),))


def _caller(fields: Fields) -> None:
    """Who made the call: the model itself (`direct`) is the only caller on this node."""
    caller = fields.object("caller")
    if caller is not None:
        caller.choice("type", ("direct",), required=True)
        caller.done()


def _assistant(found: list[Message], parts: tuple[Part, ...]) -> None:
    """Reasoning, text and calls of one answer come as separate items: one assistant turn."""
    if found and found[-1].role == "assistant":
        found[-1] = Message("assistant", found[-1].parts + parts)
    else:
        found.append(Message("assistant", parts))


def _parts(fields: Fields, key: str, allowed: tuple[str, ...]) -> tuple[Text | Image, ...]:
    """A message's content or a call's output: a string, or parts of the kinds allowed."""
    path = f"{fields.path}.{key}"
    value = fields.raw(key, required=True)
    if isinstance(value, str):
        return (Text(value),)
    if not isinstance(value, list):
        raise InvalidRequest(
            f"{path} must be a string or an array of parts, not {describe(value)}", param=path
        )
    return tuple(_part(f"{path}.{i}", part, allowed) for i, part in enumerate(value))


def _part(path: str, part: Any, allowed: tuple[str, ...]) -> Text | Image:
    fields = Fields(part, path)
    kind = fields.string("type", required=True)
    if kind not in allowed:
        raise InvalidRequest(
            f"{path}.type: {kind} parts are not taken in this message (it takes "
            f"{', '.join(allowed)})",
            param=f"{path}.type",
        )
    if kind == "input_image":
        return _image(fields)
    if kind == "refusal":
        text = fields.string("refusal", required=True)
    else:
        text = fields.string("text", required=True)
    if kind == "output_text":  # as an earlier answer held it
        fields.array("annotations")
        fields.array("logprobs")
    fields.done()
    return Text(text)


def _image(fields: Fields) -> Image:
    if "file_id" in fields:
        raise UnsupportedParameter(
            f"{fields.path}.file_id: this node has no file store; send image_url (an https:// "
            "or data: URL)",
            param=f"{fields.path}.file_id",
        )
    fields.raw("file_id")
    url = fields.string("image_url", required=True)
    fields.choice("detail", ("auto", "low", "high"))
    fields.done()
    where = f"{fields.path}.image_url"
    if url.startswith("data:"):
        media_type, data = data_url(url, where)
        return Image(fields.path, media_type, data)
    return Image(fields.path, url=https_url(url, where))


def _reasoning(fields: Fields) -> str:
    """An earlier answer's reasoning: its summaries' text, or its reasoning text where a client
    sends that. `encrypted_content` is accepted; this node does not encrypt reasoning."""
    texts = _text_parts(fields, "summary", "summary_text")
    reasoning = _text_parts(fields, "content", "reasoning_text")  # checked even when unused
    fields.string("encrypted_content")
    return "\n\n".join(texts or reasoning)


def _text_parts(fields: Fields, member: str, kind: str) -> list[str]:
    texts = []
    for path, item in fields.items(member):
        part = Fields(item, path)
        part.choice("type", (kind,), required=True)
        texts.append(part.string("text", required=True))
        part.done()
    return texts

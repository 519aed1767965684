"""Anthropic `system` and `messages` -> canonical messages. A user turn's `tool_result` blocks
become `tool` messages (one per result, in order) ahead of the rest of the turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from server.canonical import (
    Image,
    Message,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolReference,
    ToolResult,
)
from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.anthropic.options import ATTRIBUTION, DecodeOptions
from server.protocols.fields import Fields, describe
from server.protocols.rules import IMAGE_MEDIA_TYPES, base64_bytes, https_url

_USER_BLOCKS = ("text", "image", "tool_result")
_ASSISTANT_BLOCKS = ("text", "tool_use", "thinking", "redacted_thinking")
# Block types Anthropic defines that this node does not take (documents, files, server tools).
_UNSUPPORTED_BLOCKS = frozenset(
    {
        "document",
        "search_result",
        "container_upload",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "tool_reference",  # taken in tool results with --compat claude-code (tool search)
        "mcp_tool_use",
        "mcp_tool_result",
        "compaction",
    }
)


def system_prompt(fields: Fields, options: DecodeOptions) -> tuple[Message, ...]:
    """The system prompt: a string, or text blocks joined with blank lines (a client's
    attribution block left out, where the operator says so)."""
    value = fields.raw("system")
    if value is None:
        return ()
    if isinstance(value, str):
        text = value
    elif isinstance(value, list):
        texts = [_text(Fields(b, f"system.{i}")) for i, b in enumerate(value)]
        kept = [t for t in texts if not (options.attribution and ATTRIBUTION.fullmatch(t))]
        if texts and not kept:
            return ()  # the attribution alone
        texts = kept
        text = "\n\n".join(texts)
    else:
        raise InvalidRequest(
            f"system must be a string or an array of text blocks, not {describe(value)}",
            param="system",
        )
    return (Message("system", (Text(text),)),)


def messages(fields: Fields, options: DecodeOptions) -> tuple[Message, ...]:
    items = list(fields.items("messages", required=True))
    if not items:
        raise InvalidRequest("messages must have at least one message", param="messages")
    decoded: list[Message] = []
    for index, (path, item) in enumerate(items):
        last = index == len(items) - 1
        decoded.extend(_message(path, item, options, last=last))
    return tuple(decoded)


def _message(path: str, item: Any, options: DecodeOptions, *, last: bool) -> list[Message]:
    fields = Fields(item, path)
    role = fields.choice("role", ("user", "assistant", "system"), required=True)
    if role == "system" and options.system_in_messages == "refuse":
        raise InvalidRequest(
            f"{path}.role: a system message inside messages is not taken (moving it would "
            "change what the model reads at that turn); put instructions in the top-level "
            "system parameter, or fold them into the next user turn",
            param=f"{path}.role",
        )
    content = fields.raw("content", required=True)
    fields.done()
    if isinstance(content, str):
        blocks: list[Part | None] = [Text(content)]
    elif isinstance(content, list):
        blocks = [_block(f"{path}.content.{i}", b, role, options) for i, b in enumerate(content)]
    else:
        raise InvalidRequest(
            f"{path}.content must be a string or an array of content blocks, "
            f"not {describe(content)}",
            param=f"{path}.content",
        )
    if not content and not (last and role == "assistant"):
        # Only the final assistant turn (the start of the answer) may be empty.
        raise InvalidRequest(f"{path}.content must not be empty", param=f"{path}.content")
    return _split_tool_results(role, [b for b in blocks if b is not None])


def _split_tool_results(role: str, blocks: list[Part]) -> list[Message]:
    if role == "system":
        return [Message("system", tuple(blocks))]
    if role == "assistant":
        return [Message("assistant", tuple(blocks))]
    results = [Message("tool", (b,)) for b in blocks if isinstance(b, ToolResult)]
    rest = tuple(b for b in blocks if not isinstance(b, ToolResult))
    return results + ([Message("user", rest)] if rest or not results else [])


def _block(path: str, block: Any, role: str, options: DecodeOptions) -> Part | None:
    fields = Fields(block, path)
    kind = fields.string("type", required=True) or ""
    allowed: tuple[str, ...] = _ASSISTANT_BLOCKS if role == "assistant" else _USER_BLOCKS
    if role == "system":
        allowed = ("text",)
    if kind in _UNSUPPORTED_BLOCKS:
        raise UnsupportedParameter(
            f"{kind} content is not supported on this node", param=f"{path}.type"
        )
    if kind not in allowed:
        where = f"{role} messages take {', '.join(allowed)} blocks"
        if kind == "image":
            where = "images go only in user messages"
        raise InvalidRequest(f"{path}.type: {where}", param=f"{path}.type")
    if kind == "tool_result":
        return _tool_result(fields, options)
    return _READERS[kind](fields)


def cache_control(fields: Fields) -> None:
    """Accepted and ignored (the runtime caches prompt prefixes on its own), once well-typed."""
    control = fields.object("cache_control")
    if control is not None:
        control.string("type")
        control.string("ttl")


def _citations(fields: Fields) -> None:
    """Accepted and ignored, once well-typed."""
    for path, citation in fields.items("citations"):
        if not isinstance(citation, dict):
            raise InvalidRequest(f"{path} must be an object", param=path)


def _text(fields: Fields) -> str:
    fields.choice("type", ("text",), required=True)
    text = fields.string("text", required=True)
    cache_control(fields)
    _citations(fields)
    fields.done()
    return text


def _text_part(fields: Fields) -> Text:
    return Text(_text(fields))


def _image(fields: Fields) -> Image:
    fields.ignore("type")
    cache_control(fields)
    source = fields.object("source", required=True)
    if source.string("type") == "file":
        path = f"{source.path}.type"
        raise UnsupportedParameter("file sources are not supported on this node", param=path)
    kind = source.choice("type", ("base64", "url"), required=True)
    if kind == "base64":
        media_type = source.choice("media_type", IMAGE_MEDIA_TYPES, required=True)
        data = source.string("data", required=True)
        image = Image(fields.path, media_type, base64_bytes(data, f"{source.path}.data"))
    else:
        url = source.string("url", required=True)
        image = Image(fields.path, url=https_url(url, f"{source.path}.url"))
    source.done()
    fields.done()
    return image


def _tool_result(fields: Fields, options: DecodeOptions) -> ToolResult:
    fields.ignore("type")
    cache_control(fields)
    tool_use_id = fields.string("tool_use_id", required=True)
    is_error = fields.boolean("is_error") or False
    content = fields.raw("content")
    parts: tuple[Text | Image | ToolReference, ...]
    if content is None:
        parts = ()
    elif isinstance(content, str):
        parts = (Text(content),)
    elif isinstance(content, list):
        parts = tuple(
            _result_part(f"{fields.path}.content.{i}", b, options) for i, b in enumerate(content)
        )
    else:
        raise InvalidRequest(
            f"{fields.path}.content must be a string or an array of text and image blocks",
            param=f"{fields.path}.content",
        )
    fields.done()
    return ToolResult(tool_use_id, parts, is_error)


def _result_part(path: str, block: Any, options: DecodeOptions) -> Text | Image | ToolReference:
    if options.tool_search and isinstance(block, dict) and block.get("type") == "tool_reference":
        return _tool_reference(Fields(block, path))
    part = _block(path, block, "user", options)
    if not isinstance(part, Text | Image):
        raise InvalidRequest(
            f"{path}.type: tool results hold text and image blocks", param=f"{path}.type"
        )
    return part


def _tool_reference(fields: Fields) -> ToolReference:
    """A tool search's result naming a deferred tool (see decode: it must be one of tools)."""
    fields.ignore("type")
    cache_control(fields)
    name = fields.string("tool_name", required=True, min_length=1)
    fields.done()
    return ToolReference(name)


def _tool_use(fields: Fields) -> ToolCall:
    fields.ignore("type")
    cache_control(fields)
    call_id = fields.string("id", required=True, min_length=1)
    name = fields.string("name", required=True)
    arguments = fields.object("input", required=True)
    fields.done()
    return ToolCall(call_id, name, orjson.dumps(arguments.value).decode())


def _thinking(fields: Fields) -> Thinking:
    fields.ignore("type")
    text = fields.string("thinking", required=True)
    signature = fields.string("signature")
    fields.done()
    return Thinking(text, signature)


def _redacted_thinking(fields: Fields) -> None:
    """Accepted in assistant turns and left out of the prompt."""
    fields.ignore("type")
    fields.string("data", required=True)
    fields.done()


_READERS: dict[str, Callable[[Fields], Part | None]] = {
    "text": _text_part,
    "image": _image,
    "tool_use": _tool_use,
    "thinking": _thinking,
    "redacted_thinking": _redacted_thinking,
}

"""Anthropic Messages request JSON -> the canonical request."""

from __future__ import annotations

from typing import Any

from server.canonical import GenerateRequest, Message, Sampling, Text
from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.fields import Fields, describe

_IGNORED_TOP_LEVEL = ("metadata", "service_tier", "context_management")
_IGNORED_IN_BLOCKS = ("cache_control", "citations")


def decode_messages(body: Any) -> GenerateRequest:
    fields = Fields(body)
    model = fields.string("model", required=True, min_length=1)
    max_tokens = fields.integer("max_tokens", required=True, minimum=1)
    system = _system(fields)
    messages = tuple(_message(path, item) for path, item in fields.items("messages", required=True))
    if not messages:
        raise InvalidRequest("messages must not be empty", param="messages")
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=fields.number("temperature", minimum=0, maximum=1),
        top_p=fields.number("top_p", minimum=0, maximum=1),
        top_k=fields.integer("top_k", minimum=1, maximum=1_000_000),
        stop=_stop_sequences(fields),
    )
    stream = fields.boolean("stream") or False
    fields.ignore(*_IGNORED_TOP_LEVEL)
    fields.done()
    assert model is not None
    return GenerateRequest(model, system + messages, sampling, stream)


def decode_count_tokens(body: Any) -> GenerateRequest:
    """count_tokens takes the request a Messages call would, without max_tokens and stream."""
    fields = Fields(body)
    model = fields.string("model", required=True, min_length=1)
    system = _system(fields)
    messages = tuple(_message(path, item) for path, item in fields.items("messages", required=True))
    if not messages:
        raise InvalidRequest("messages must not be empty", param="messages")
    fields.ignore(*_IGNORED_TOP_LEVEL)
    fields.done()
    assert model is not None
    return GenerateRequest(model, system + messages)


def _system(fields: Fields) -> tuple[Message, ...]:
    """The system prompt, a string or text blocks joined with blank lines."""
    value = fields.raw("system")
    if value is None:
        return ()
    if isinstance(value, str):
        text = value
    elif isinstance(value, list):
        texts = []
        for index, block in enumerate(value):
            texts.append(_text_block(Fields(block, f"system.{index}")))
        text = "\n\n".join(texts)
    else:
        raise InvalidRequest(
            f"system must be a string or an array of text blocks, not {describe(value)}",
            param="system",
        )
    return (Message("system", (Text(text),)),)


def _message(path: str, item: Any) -> Message:
    fields = Fields(item, path)
    role = fields.string("role", required=True)
    if role not in ("user", "assistant"):
        raise InvalidRequest(
            f"{path}.role must be user or assistant; instructions go in the top-level system "
            "parameter",
            param=f"{path}.role",
        )
    content = fields.raw("content", required=True)
    if isinstance(content, str):
        parts: tuple[Text, ...] = (Text(content),)
    elif isinstance(content, list):
        parts = tuple(_block(f"{path}.content.{i}", block) for i, block in enumerate(content))
    else:
        raise InvalidRequest(
            f"{path}.content must be a string or an array of content blocks, "
            f"not {describe(content)}",
            param=f"{path}.content",
        )
    fields.done()
    return Message("user" if role == "user" else "assistant", parts)


def _block(path: str, block: Any) -> Text:
    fields = Fields(block, path)
    kind = fields.string("type", required=True)
    if kind == "text":
        return Text(_text_block(fields))
    raise UnsupportedParameter(
        f"{kind} content blocks are not supported on this node", param=f"{path}.type"
    )


def _text_block(fields: Fields) -> str:
    kind = fields.string("type", required=True)
    if kind != "text":
        raise InvalidRequest(f"{fields.path}.type must be text", param=f"{fields.path}.type")
    text = fields.string("text", required=True)
    fields.ignore(*_IGNORED_IN_BLOCKS)
    fields.done()
    assert text is not None
    return text


def _stop_sequences(fields: Fields) -> tuple[str, ...]:
    stops = []
    for path, value in fields.items("stop_sequences"):
        if not isinstance(value, str) or not value:
            raise InvalidRequest(f"{path} must be a non-empty string", param=path)
        stops.append(value)
    return tuple(stops)

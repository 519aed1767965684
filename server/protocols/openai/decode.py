"""OpenAI Chat Completions request JSON -> the canonical request and the chat-only options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.canonical import GenerateRequest, Message, Role, Sampling, Text
from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.fields import Fields, describe

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
_IGNORED_TOP_LEVEL = ("metadata", "store", "service_tier", "user")
# Listed members of a message this node takes and does not use (ChatML has no speaker names).
_IGNORED_IN_MESSAGES = ("name", "refusal")
_KNOWN_IN_MESSAGES = frozenset({"role", "content", *_IGNORED_IN_MESSAGES})


@dataclass(frozen=True, slots=True)
class ChatOptions:
    include_usage: bool = False


def decode_chat(body: Any) -> tuple[GenerateRequest, ChatOptions]:
    fields = Fields(body)
    model = fields.string("model", required=True, min_length=1)
    messages = tuple(_message(path, item) for path, item in fields.items("messages", required=True))
    if not messages:
        raise InvalidRequest("messages must not be empty", param="messages")
    max_tokens = fields.integer("max_tokens", minimum=1)
    max_completion_tokens = fields.integer("max_completion_tokens", minimum=1)
    sampling = Sampling(
        max_tokens=max_completion_tokens if max_completion_tokens is not None else max_tokens,
        temperature=fields.number("temperature", minimum=0, maximum=2),
        top_p=fields.number("top_p", minimum=0, maximum=1),
        top_k=_top_k(fields),
        seed=fields.integer("seed"),
        stop=_stop(fields),
    )
    fields.integer("n", minimum=1, maximum=1)
    stream = fields.boolean("stream") or False
    options = ChatOptions(include_usage=_include_usage(fields, stream))
    route = fields.string("route")
    if route not in (None, "local", "gateway"):
        raise InvalidRequest("route must be local or gateway", param="route")
    fields.ignore(*_IGNORED_TOP_LEVEL)
    fields.done()
    assert model is not None
    return GenerateRequest(model, messages, sampling, stream), options


def _message(path: str, item: Any) -> Message:
    fields = Fields(item, path)
    role_name = fields.string("role", required=True)
    role = _ROLES.get(role_name or "")
    if role is None:
        if role_name == "tool":
            raise UnsupportedParameter("tool messages are not supported yet", param=f"{path}.role")
        raise InvalidRequest(
            f"{path}.role must be system, developer, user, assistant or tool", param=f"{path}.role"
        )
    content = fields.raw("content")
    if content is None:
        if role != "assistant":
            raise InvalidRequest(
                f"{path}.content is required on {role_name} messages (only assistant messages "
                "may have null content)",
                param=f"{path}.content",
            )
        parts: tuple[Text, ...] = ()
    elif isinstance(content, str):
        parts = (Text(content),)
    elif isinstance(content, list):
        parts = tuple(_part(f"{path}.content.{i}", part) for i, part in enumerate(content))
    else:
        raise InvalidRequest(
            f"{path}.content must be a string or an array of parts, not {describe(content)}",
            param=f"{path}.content",
        )
    # Members not listed in the contract (annotations, audio echoed from a response) are ignored.
    fields.ignore(*(key for key in item if key not in _KNOWN_IN_MESSAGES))
    fields.ignore(*_IGNORED_IN_MESSAGES)
    fields.done()
    return Message(role, parts)


def _part(path: str, part: Any) -> Text:
    fields = Fields(part, path)
    kind = fields.string("type", required=True)
    if kind != "text":
        raise UnsupportedParameter(
            f"{kind} content parts are not supported on this node", param=f"{path}.type"
        )
    text = fields.string("text", required=True)
    fields.done()
    assert text is not None
    return Text(text)


def _top_k(fields: Fields) -> int | None:
    top_k = fields.integer("top_k", minimum=-1, maximum=1_000_000)
    if top_k == 0:
        raise InvalidRequest("top_k must be -1 (off) or at least 1", param="top_k")
    return None if top_k == -1 else top_k


def _stop(fields: Fields) -> tuple[str, ...]:
    value = fields.raw("stop")
    if value is None:
        return ()
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list):
        raise InvalidRequest("stop must be a string or an array of strings", param="stop")
    for index, stop in enumerate(values):
        if not isinstance(stop, str) or not stop:
            raise InvalidRequest(f"stop.{index} must be a non-empty string", param=f"stop.{index}")
    return tuple(values)


def _include_usage(fields: Fields, stream: bool) -> bool:
    options = fields.object("stream_options")
    if options is None:
        return False
    include = options.boolean("include_usage") or False
    options.done()
    del stream
    return include

"""OpenAI Chat Completions request JSON -> the canonical request and the chat-only options, every
member checked against the contract: taken, accepted and ignored, or `unsupported_parameter`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from server.canonical import (
    GenerateRequest,
    ResponseFormat,
    Sampling,
    ThinkingConfig,
    ThinkingMode,
    Tool,
    ToolChoice,
    ToolChoiceKind,
)
from server.errors import InvalidRequest
from server.protocols.fields import Fields, describe
from server.protocols.openai.content import messages
from server.protocols.rules import json_schema, tool_names

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOKEN_ID = re.compile(r"[0-9]{1,9}")
MAX_STOP = 32  # what the runtime matches
LOGIT_BIAS_LIMIT = 100.0
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ChatOptions:
    include_usage: bool = False
    route: Literal["local", "gateway"] = "local"


def decode_chat(body: Any) -> tuple[GenerateRequest, ChatOptions]:
    fields = Fields(body)
    model = fields.string("model", required=True, min_length=1, max_length=256)
    conversation = messages(fields)
    tools = _tools(fields)
    request = GenerateRequest(
        model=model,
        messages=conversation,
        sampling=_sampling(fields),
        stream=fields.boolean("stream") or False,
        tools=tools,
        tool_choice=_tool_choice(fields, tools),
        response_format=_response_format(fields),
        thinking=_thinking(fields),
    )
    if fields.integer("n", minimum=1) not in (None, 1):
        raise InvalidRequest("n: this node answers with one choice; only 1 is supported", param="n")
    options = ChatOptions(
        include_usage=_include_usage(fields),
        route="gateway" if fields.choice("route", ("local", "gateway")) == "gateway" else "local",
    )
    _ignored(fields)
    fields.done()
    return request, options


def _ignored(fields: Fields) -> None:
    """Accepted and ignored, once well-typed."""
    fields.object("metadata")
    fields.boolean("store")
    fields.string("service_tier")
    fields.string("user")


def _sampling(fields: Fields) -> Sampling:
    max_tokens = fields.integer("max_tokens", minimum=1)
    max_completion_tokens = fields.integer("max_completion_tokens", minimum=1)
    logprobs = fields.boolean("logprobs") or False
    top_logprobs = fields.integer("top_logprobs", minimum=0, maximum=20)
    if top_logprobs is not None and not logprobs:
        raise InvalidRequest("top_logprobs needs logprobs: true", param="top_logprobs")
    repetition_penalty = fields.number("repetition_penalty", minimum=0, maximum=2)
    if repetition_penalty == 0:
        # Logits are divided by it: the runtime takes values above 0 only.
        raise InvalidRequest(
            "repetition_penalty must be above 0 (1 is no penalty)", param="repetition_penalty"
        )
    return Sampling(
        max_tokens=max_completion_tokens if max_completion_tokens is not None else max_tokens,
        temperature=fields.number("temperature", minimum=0, maximum=2),
        top_p=fields.number("top_p", minimum=0, maximum=1),
        top_k=_top_k(fields),
        min_p=fields.number("min_p", minimum=0, maximum=1),
        seed=fields.integer("seed"),
        stop=_stop(fields),
        presence_penalty=fields.number("presence_penalty", minimum=-2, maximum=2),
        frequency_penalty=fields.number("frequency_penalty", minimum=-2, maximum=2),
        repetition_penalty=repetition_penalty,
        logit_bias=_logit_bias(fields),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
    )


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
        raise InvalidRequest(
            f"stop must be a string or an array of strings, not {describe(value)}", param="stop"
        )
    for index, stop in enumerate(values):
        path = "stop" if isinstance(value, str) else f"stop.{index}"
        if not isinstance(stop, str) or not stop:
            raise InvalidRequest(f"{path} must be a non-empty string", param=path)
    if len(values) > MAX_STOP:
        raise InvalidRequest(f"stop takes at most {MAX_STOP} sequences", param="stop")
    return tuple(values)


def _logit_bias(fields: Fields) -> dict[int, float] | None:
    bias = fields.object("logit_bias")
    if bias is None:
        return None
    taken = {}
    for key in list(bias.value):
        path = f"logit_bias.{key}"
        if not TOKEN_ID.fullmatch(key):
            raise InvalidRequest(f"{path}: keys are token ids (integers)", param=path)
        value = bias.number(key, required=True, minimum=-LOGIT_BIAS_LIMIT, maximum=LOGIT_BIAS_LIMIT)
        taken[int(key)] = value
    bias.done()
    return taken


def _include_usage(fields: Fields) -> bool:
    options = fields.object("stream_options")
    if options is None:
        return False
    include = options.boolean("include_usage") or False
    options.done()
    return include


def _tools(fields: Fields) -> tuple[Tool, ...]:
    tools = []
    for path, item in fields.items("tools"):
        tool = Fields(item, path)
        tool.choice("type", ("function",), required=True)
        function = tool.object("function", required=True)
        name = function.string("name", required=True)
        description = function.string("description")
        parameters = function.raw("parameters")
        schema = EMPTY_PARAMETERS
        if parameters is not None:
            schema = json_schema(parameters, f"{function.path}.parameters")
        strict = function.boolean("strict") or False
        function.done()
        tool.done()
        tools.append(Tool(name, description, schema, strict, f"{function.path}.parameters"))
    tool_names([(f"tools.{i}.function.name", t.name) for i, t in enumerate(tools)], NAME, 64)
    return tuple(tools)


def _tool_choice(fields: Fields, tools: tuple[Tool, ...]) -> ToolChoice:
    parallel = fields.boolean("parallel_tool_calls")
    parallel = True if parallel is None else parallel
    value = fields.raw("tool_choice")
    if value is None or value == "auto":
        return ToolChoice(ToolChoiceKind.AUTO, parallel=parallel)
    if value == "none":
        return ToolChoice(ToolChoiceKind.NONE, parallel=parallel)
    if value == "required":
        if not tools:
            raise InvalidRequest("tool_choice required needs tools", param="tool_choice")
        return ToolChoice(ToolChoiceKind.ANY, parallel=parallel)
    if not isinstance(value, dict):
        raise InvalidRequest(
            "tool_choice must be none, auto, required or a function choice", param="tool_choice"
        )
    choice = Fields(value, "tool_choice")
    choice.choice("type", ("function",), required=True)
    function = choice.object("function", required=True)
    name = function.string("name", required=True)
    function.done()
    choice.done()
    if name not in {tool.name for tool in tools}:
        path = "tool_choice.function.name"
        raise InvalidRequest(f"{path}: {name} is not one of tools", param=path)
    return ToolChoice(ToolChoiceKind.NAMED, name, parallel)


def _response_format(fields: Fields) -> ResponseFormat | None:
    form = fields.object("response_format")
    if form is None:
        return None
    kind = form.choice("type", ("text", "json_object", "json_schema"), required=True)
    if kind != "json_schema":
        form.done()
        return None if kind == "text" else ResponseFormat("json_object")
    spec = form.object("json_schema", required=True)
    name = spec.string("name", required=True)
    if name is not None and not NAME.fullmatch(name):
        path = "response_format.json_schema.name"
        raise InvalidRequest(
            f"{path} must be 1 to 64 letters, digits, underscores or hyphens", param=path
        )
    spec.string("description")
    spec.boolean("strict")
    schema = spec.raw("schema")
    spec.done()
    form.done()
    if schema is None:
        return ResponseFormat("json_object")
    path = f"{spec.path}.schema"
    return ResponseFormat("json_schema", json_schema(schema, path), path)


def _thinking(fields: Fields) -> ThinkingConfig:
    kwargs = fields.object("chat_template_kwargs")
    if kwargs is None:
        return ThinkingConfig()
    enabled = kwargs.boolean("enable_thinking") or False
    kwargs.done()  # only enable_thinking is taken
    return ThinkingConfig(ThinkingMode.ADAPTIVE if enabled else ThinkingMode.DISABLED)

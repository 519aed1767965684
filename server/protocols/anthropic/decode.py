"""Anthropic Messages request JSON -> the canonical request, every member checked against the
contract: taken, accepted and ignored, or refused as `unsupported_parameter`."""

from __future__ import annotations

import json
import re
from typing import Any

from server.canonical import (
    GenerateRequest,
    Message,
    ResponseFormat,
    Sampling,
    ThinkingConfig,
    ThinkingMode,
    Tool,
    ToolChoice,
    ToolChoiceKind,
    ToolReference,
    ToolResult,
)
from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.anthropic.content import cache_control, messages, system_prompt
from server.protocols.anthropic.options import DecodeOptions
from server.protocols.fields import Fields
from server.protocols.rules import direct_callers, json_schema, tool_names

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
MAX_STOP_SEQUENCES = 32  # what the runtime matches
MIN_THINKING_BUDGET = 1024
_THINKING_DISPLAY = ("summarized", "omitted", "updates")
THREAD_UNSUPPORTED = "thread_unsupported_request"  # anthropic-sdk _thread_state, ThreadState


def decode_messages(body: Any, options: DecodeOptions | None = None) -> GenerateRequest:
    options = options or DecodeOptions()
    fields = Fields(body)
    model = _model(fields)
    max_tokens = fields.integer("max_tokens", required=True, minimum=1)
    conversation = system_prompt(fields, options) + messages(fields, options)
    tools = _loaded(_tools(fields, options), conversation)
    _no_thread(fields)
    request = GenerateRequest(
        model=model,
        messages=conversation,
        sampling=_sampling(fields, max_tokens),
        stream=fields.boolean("stream") or False,
        tools=tools,
        tool_choice=_tool_choice(fields, tools),
        response_format=_output_config(fields),
        thinking=_thinking(fields, max_tokens),
    )
    _ignored(fields, options)
    fields.done()
    return request


def decode_count_tokens(body: Any, options: DecodeOptions | None = None) -> GenerateRequest:
    """The request a Messages call would make, without `max_tokens`, sampling and `stream`."""
    options = options or DecodeOptions()
    fields = Fields(body)
    model = _model(fields)
    conversation = system_prompt(fields, options) + messages(fields, options)
    tools = _loaded(_tools(fields, options), conversation)
    request = GenerateRequest(
        model=model,
        messages=conversation,
        tools=tools,
        tool_choice=_tool_choice(fields, tools),
        response_format=_output_config(fields),
        thinking=_thinking(fields, None),
    )
    _ignored(fields, options)
    fields.done()
    return request


def _model(fields: Fields) -> str:
    model = fields.string("model", required=True, min_length=1, max_length=256)
    return model


def _no_thread(fields: Fields) -> None:
    """Server-held threads are not in the contract; the refusal carries the code on which the
    SDKs' tool runners fall back to sending the whole conversation."""
    if fields.raw("thread") is not None:
        raise UnsupportedParameter(
            "thread: this node keeps no conversations; send the whole conversation in messages",
            param="thread",
            details={"error_code": THREAD_UNSUPPORTED},
        )


def _ignored(fields: Fields, options: DecodeOptions) -> None:
    """Accepted and ignored, once well-typed."""
    metadata = fields.object("metadata")
    if metadata is not None:
        metadata.string("user_id")
    fields.string("service_tier")
    fields.object("context_management")
    # Hints that change nothing the node does: the prefix cache needs no marker, there is one
    # speed, and cache diagnostics have nothing to report.
    cache_control(fields)
    fields.choice("speed", ("standard", "fast"))
    fields.object("diagnostics")
    if options.safeguards:
        _safeguards(fields)


def _safeguards(fields: Fields) -> None:
    """Claude Code's `safeguards`, accepted and ignored: an object, or (full mode with automatic
    permissions) an array of objects such as `{"type": "dangerous_tool_use",
    "classifier_context": {...}}`."""
    value = fields.raw("safeguards")
    if value is None or isinstance(value, dict):
        return
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise InvalidRequest(
            "safeguards must be an object or an array of objects", param="safeguards"
        )


def _sampling(fields: Fields, max_tokens: int) -> Sampling:
    return Sampling(
        max_tokens=max_tokens,
        temperature=fields.number("temperature", minimum=0, maximum=1),
        top_p=fields.number("top_p", minimum=0, maximum=1),
        top_k=fields.integer("top_k", minimum=1, maximum=1_000_000),
        stop=_stop_sequences(fields),
    )


def _stop_sequences(fields: Fields) -> tuple[str, ...]:
    stops = []
    for path, value in fields.items("stop_sequences"):
        if not isinstance(value, str) or not value:
            raise InvalidRequest(f"{path} must be a non-empty string", param=path)
        stops.append(value)
    if len(stops) > MAX_STOP_SEQUENCES:
        raise InvalidRequest(
            f"stop_sequences takes at most {MAX_STOP_SEQUENCES} sequences", param="stop_sequences"
        )
    return tuple(stops)


def _tools(fields: Fields, options: DecodeOptions) -> tuple[Tool, ...]:
    tools = tuple(_tool(path, item, options) for path, item in fields.items("tools"))
    tool_names([(f"tools.{i}.name", t.name) for i, t in enumerate(tools)], TOOL_NAME, 128)
    return tools


def _loaded(tools: tuple[Tool, ...], conversation: tuple[Message, ...]) -> tuple[Tool, ...]:
    """The tools the model is shown and may call: every tool not deferred, and each deferred
    one a `tool_reference` in a tool result has loaded. A reference to a tool not among them
    is an error, as Anthropic's `tool_reference_unresolved`."""
    names = {tool.name for tool in tools}
    loaded = set()
    for message in conversation:
        for part in message.parts:
            for found in part.parts if isinstance(part, ToolResult) else ():
                if isinstance(found, ToolReference):
                    if found.name not in names:
                        raise InvalidRequest(
                            f"tool_reference names {found.name}, which is not one of tools",
                            param="messages",
                        )
                    loaded.add(found.name)
    return tuple(tool for tool in tools if not tool.deferred or tool.name in loaded)


def _tool(path: str, item: Any, options: DecodeOptions) -> Tool:
    fields = Fields(item, path)
    kind = fields.string("type")
    if kind not in (None, "custom"):
        raise UnsupportedParameter(
            f"{kind} is a tool Anthropic defines or runs; this node takes custom tools "
            "(name, description, input_schema)",
            param=f"{path}.type",
        )
    name = fields.string("name", required=True)
    description = _with_examples(fields, fields.string("description"))
    schema = json_schema(fields.raw("input_schema", required=True), f"{path}.input_schema")
    strict = fields.boolean("strict") or False
    deferred = bool(fields.boolean("defer_loading"))
    if deferred and not options.tool_search:
        raise UnsupportedParameter(
            f"{path}.defer_loading: true needs tool search, which this node takes with "
            "--compat claude-code",
            param=f"{path}.defer_loading",
        )
    cache_control(fields)
    fields.boolean("eager_input_streaming")  # input streams as it is written anyway
    direct_callers(fields)
    fields.done()
    return Tool(name, description, schema, strict, f"{path}.input_schema", deferred)


def _with_examples(fields: Fields, description: str | None) -> str | None:
    """`input_examples` are shown to the model after the tool's description."""
    examples = []
    for where, example in fields.items("input_examples"):
        if not isinstance(example, dict):
            raise InvalidRequest(f"{where} must be an object (a tool input)", param=where)
        examples.append(json.dumps(example))
    if not examples:
        return description
    shown = "Examples of its input:\n" + "\n".join(examples)
    return f"{description}\n\n{shown}" if description else shown


def _tool_choice(fields: Fields, tools: tuple[Tool, ...]) -> ToolChoice:
    choice = fields.object("tool_choice")
    if choice is None:
        return ToolChoice()
    kind = choice.choice("type", ("auto", "any", "tool", "none"), required=True)
    name = choice.string("name", required=kind == "tool") if kind == "tool" else None
    parallel = True
    if kind != "none":
        parallel = not (choice.boolean("disable_parallel_tool_use") or False)
    choice.done()
    if kind in ("any", "tool") and not tools:
        raise InvalidRequest(f"tool_choice {kind} needs tools", param="tool_choice")
    if name is not None and name not in {tool.name for tool in tools}:
        raise InvalidRequest(
            f"tool_choice.name: {name} is not one of tools", param="tool_choice.name"
        )
    kinds = {"auto": ToolChoiceKind.AUTO, "any": ToolChoiceKind.ANY, "none": ToolChoiceKind.NONE}
    return ToolChoice(kinds.get(kind or "", ToolChoiceKind.NAMED), name, parallel)


def _thinking(fields: Fields, max_tokens: int | None) -> ThinkingConfig:
    thinking = fields.object("thinking")
    if thinking is None:
        return ThinkingConfig()
    kind = thinking.choice("type", ("enabled", "adaptive", "disabled"), required=True)
    budget = None
    if kind == "enabled":
        budget = thinking.integer("budget_tokens", required=True)
        if budget < MIN_THINKING_BUDGET:
            raise InvalidRequest(
                f"thinking.budget_tokens must be at least {MIN_THINKING_BUDGET}",
                param="thinking.budget_tokens",
            )
        if max_tokens is not None and budget >= max_tokens:
            raise InvalidRequest("must be less than max_tokens", param="thinking.budget_tokens")
    if kind != "disabled":
        thinking.choice("display", _THINKING_DISPLAY)  # accepted and ignored
    thinking.done()
    return ThinkingConfig(ThinkingMode(kind or "disabled"), budget)


def _output_config(fields: Fields) -> ResponseFormat | None:
    config = fields.object("output_config")
    if config is None:
        return None
    config.choice("effort", ("low", "medium", "high", "xhigh", "max"))  # accepted and ignored
    form = config.object("format")
    config.done()
    if form is None:
        return None
    form.choice("type", ("json_schema",), required=True)
    schema = json_schema(form.raw("schema", required=True), f"{form.path}.schema")
    form.done()
    return ResponseFormat("json_schema", schema, f"{form.path}.schema")

"""OpenAI Responses request JSON -> the canonical request and what the response object repeats of
it, every member checked: taken, accepted and ignored, or `unsupported_parameter` naming it.
`store` and `previous_response_id` are taken (the route keeps and continues stored responses,
`server.routes.responses`); what needs a conversation object is refused with the reason."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from server.canonical import (
    GenerateRequest,
    ResponseFormat,
    Sampling,
    ThinkingConfig,
    ThinkingMode,
)
from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.fields import Fields
from server.protocols.openai.decode import NAME
from server.protocols.responses.input import STATELESS, conversation
from server.protocols.responses.tools import (
    CallTarget,
    ResponsesOptions,
    targets,
    tool_choice,
    tools,
)
from server.protocols.rules import json_schema

# reasoning.effort -> the reasoning's budget of tokens (the grammar closes it when spent);
# the answer's max_output_tokens bounds both. "none" answers without reasoning.
REASONING_BUDGETS = {"minimal": 256, "low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768}
INCLUDABLE = ("message.output_text.logprobs", "reasoning.encrypted_content")


@dataclass(frozen=True, slots=True)
class ResponsesEcho:
    """The request's settings as the response object repeats them (OpenAI's defaults where the
    request left one out)."""

    instructions: str | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    parallel_tool_calls: bool = True
    reasoning: dict[str, Any] = field(default_factory=lambda: {"effort": None, "summary": None})
    service_tier: str = "default"
    temperature: float = 1.0
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: Any = "auto"
    tools: tuple[dict[str, Any], ...] = ()
    top_logprobs: int = 0
    top_p: float = 1.0
    user: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    store: bool = True  # OpenAI's default: the response is kept
    previous_response_id: str | None = None
    # The names the model may call, as their calls come back (the name inside a namespace).
    targets: dict[str, CallTarget] = field(default_factory=dict)
    sampling_set: frozenset[str] = frozenset()  # temperature, top_p: those the request set

    def sampled_as(self, defaults: dict[str, float]) -> ResponsesEcho:
        """The temperature and top_p the answer is sampled with: the request's, else the
        model's recommendation (which the node applies), else OpenAI's default of 1."""

        def used(name: str) -> float:
            given: float = getattr(self, name)
            return given if name in self.sampling_set else defaults.get(name, given)

        return replace(self, temperature=used("temperature"), top_p=used("top_p"))


def decode_responses(
    body: Any, options: ResponsesOptions | None = None
) -> tuple[GenerateRequest, ResponsesEcho]:
    fields = Fields(body)
    model = fields.string("model", required=True, min_length=1, max_length=256)
    store, previous = _state(fields)
    instructions = fields.value.get("instructions")
    messages = conversation(fields)
    found, wire_tools = tools(fields, options or ResponsesOptions())
    choice, wire_choice = tool_choice(fields, found)
    response_format, wire_text = _text(fields)
    thinking, wire_reasoning = _reasoning(fields)
    logprobs = _include(fields)
    top_logprobs = fields.integer("top_logprobs", minimum=0, maximum=20)
    sampling = Sampling(
        max_tokens=fields.integer("max_output_tokens", minimum=1),
        temperature=fields.number("temperature", minimum=0, maximum=2),
        top_p=fields.number("top_p", minimum=0, maximum=1),
        logprobs=logprobs,
        top_logprobs=top_logprobs if logprobs else None,
    )
    request = GenerateRequest(
        model=model,
        messages=messages,
        sampling=sampling,
        stream=fields.boolean("stream") or False,
        tools=found,
        tool_choice=choice,
        response_format=response_format,
        thinking=thinking,
    )
    _stream_options(fields)
    echo = ResponsesEcho(
        instructions=instructions,
        max_output_tokens=sampling.max_tokens,
        metadata=_metadata(fields),
        parallel_tool_calls=choice.parallel,
        reasoning=wire_reasoning,
        service_tier=fields.choice("service_tier", ("auto", "default", "flex", "priority"))
        or "default",
        temperature=1.0 if sampling.temperature is None else sampling.temperature,
        text=wire_text,
        tool_choice=wire_choice,
        tools=wire_tools,
        top_logprobs=top_logprobs or 0,
        top_p=1.0 if sampling.top_p is None else sampling.top_p,
        user=fields.string("user"),
        prompt_cache_key=fields.string("prompt_cache_key"),  # the prefix cache needs no key
        safety_identifier=fields.string("safety_identifier"),
        store=store,
        previous_response_id=previous,
        targets=targets(found),
        sampling_set=frozenset(
            name for name in ("temperature", "top_p") if getattr(sampling, name) is not None
        ),
    )
    fields.object("client_metadata")  # what a client says about itself (Codex): ignored
    fields.done()
    return request, echo


def _state(fields: Fields) -> tuple[bool, str | None]:
    """Whether the response is kept (OpenAI's default: it is) and the stored response it
    continues; what needs a conversation object or a stored prompt refused with the reason."""
    for name in ("conversation", "prompt"):
        if name in fields:
            raise UnsupportedParameter(f"{name} is not supported: {STATELESS}", param=name)
        fields.raw(name)
    store = fields.boolean("store")
    previous = fields.string("previous_response_id", min_length=1)
    if fields.boolean("background"):
        raise UnsupportedParameter(
            "background: true is not supported: this node answers while the request is open; "
            "stream the response instead",
            param="background",
        )
    if fields.choice("truncation", ("auto", "disabled")) == "auto":
        raise UnsupportedParameter(
            "truncation: auto is not supported: this node never drops input; a conversation "
            "beyond the window is refused (truncation: disabled)",
            param="truncation",
        )
    if "max_tool_calls" in fields:
        raise UnsupportedParameter(
            "max_tool_calls is not supported on this node; parallel_tool_calls: false allows "
            "one call per answer",
            param="max_tool_calls",
        )
    fields.raw("max_tool_calls")  # null: unset
    return store is not False, previous


def _include(fields: Fields) -> bool:
    """`include`: whether the answer's tokens come with their log probabilities. Encrypted
    reasoning is accepted: reasoning comes back in the clear, as its summary."""
    logprobs = False
    for path, value in fields.items("include"):
        if value not in INCLUDABLE:
            raise UnsupportedParameter(
                f"{path}: {value!r} cannot be included on this node (it includes "
                f"{', '.join(INCLUDABLE)})",
                param=path,
            )
        logprobs = logprobs or value == "message.output_text.logprobs"
    return logprobs


def _stream_options(fields: Fields) -> None:
    """Taken with or without stream (without, it has no effect)."""
    options = fields.object("stream_options")
    if options is not None:
        options.boolean("include_obfuscation")  # nothing is obfuscated: accepted, no effect
        options.done()


def _metadata(fields: Fields) -> dict[str, str]:
    metadata = fields.object("metadata")
    if metadata is None:
        return {}
    if len(metadata.value) > 16:
        raise InvalidRequest("metadata takes at most 16 keys", param="metadata")
    taken = {}
    for key in list(metadata.value):
        if len(key) > 64:
            raise InvalidRequest("metadata keys are at most 64 characters", param="metadata")
        taken[key] = metadata.string(key, required=True, max_length=512)
    metadata.done()
    return taken


def _text(fields: Fields) -> tuple[ResponseFormat | None, dict[str, Any]]:
    text = fields.object("text")
    if text is None:
        return None, {"format": {"type": "text"}}
    wire: dict[str, Any] = {"format": {"type": "text"}}
    verbosity = text.choice("verbosity", ("low", "medium", "high"))  # a hint: accepted
    if verbosity is not None:
        wire["verbosity"] = verbosity
    form = text.object("format")
    if form is None:
        text.done()
        return None, wire
    kind = form.choice("type", ("text", "json_object", "json_schema"), required=True)
    text.done()
    if kind != "json_schema":
        form.done()
        wire["format"] = {"type": kind}
        return (None if kind == "text" else ResponseFormat("json_object")), wire
    name = form.string("name", required=True)
    if not NAME.fullmatch(name):
        path = "text.format.name"
        raise InvalidRequest(
            f"{path} must be 1 to 64 letters, digits, underscores or hyphens", param=path
        )
    description = form.string("description")
    strict = form.boolean("strict")
    schema = json_schema(form.raw("schema", required=True), "text.format.schema")
    form.done()
    wire["format"] = {
        "type": "json_schema",
        "description": description,
        "name": name,
        "schema": schema,
        "strict": strict,
    }
    return ResponseFormat("json_schema", schema, "text.format.schema"), wire


def _reasoning(fields: Fields) -> tuple[ThinkingConfig, dict[str, Any]]:
    reasoning = fields.object("reasoning")
    if reasoning is None:
        return ThinkingConfig(), {"effort": None, "summary": None}
    effort = reasoning.choice("effort", ("none", *REASONING_BUDGETS))
    summary = reasoning.choice("summary", ("auto", "concise", "detailed"))
    generate_summary = reasoning.choice("generate_summary", ("auto", "concise", "detailed"))
    reasoning.done()
    wire = {"effort": effort, "summary": summary or generate_summary}
    if effort is None or effort == "none":
        return ThinkingConfig(), wire
    return ThinkingConfig(ThinkingMode.ENABLED, REASONING_BUDGETS[effort]), wire

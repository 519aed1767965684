"""The canonical generation request: what every protocol decodes into, validated and typed."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Image:
    """Inline bytes (`data`, with the declared `media_type`) or an `https://` URL to fetch.
    `path` is where it stands in the request, for errors that name it."""

    path: str
    media_type: str | None = None
    data: bytes | None = None
    url: str | None = None


@dataclass(frozen=True, slots=True)
class Thinking:
    """Reasoning of an earlier assistant turn, as the client sent it back."""

    text: str
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text of an object; a free-form tool's input as it is
    free_form: bool = False


@dataclass(frozen=True, slots=True)
class ToolReference:
    """A tool search's result: the deferred tool it loads (its definition is shown here)."""

    name: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    tool_call_id: str
    parts: tuple[Text | Image | ToolReference, ...]
    is_error: bool = False


Part = Text | Image | Thinking | ToolCall | ToolResult


@dataclass(frozen=True, slots=True)
class Message:
    """Tool results arrive as `tool` messages holding one `ToolResult` each, whichever protocol
    sent them."""

    role: Role
    parts: tuple[Part, ...]

    @property
    def text(self) -> str:
        return "".join(part.text for part in self.parts if isinstance(part, Text))


@dataclass(frozen=True, slots=True)
class FreeForm:
    """A tool whose input is text, not a JSON object (OpenAI's custom tools): any text, or text
    that a grammar holds to (`grammar`: xgrammar's EBNF, translated from the request's Lark or
    regular expression; `definition`: as the request wrote it, shown to the model)."""

    syntax: Literal["text", "lark", "regex"] = "text"
    definition: str = ""
    grammar: str | None = None


@dataclass(frozen=True, slots=True)
class Tool:
    """`name` is what the model writes: a tool inside a namespace is `namespace.name` (the
    protocol gives the call back as the name inside, with its namespace)."""

    name: str
    description: str | None
    input_schema: dict[str, Any]
    strict: bool = False
    schema_path: str = ""  # where the schema stands in the request, for errors that name it
    # Loaded by a tool search: shown where a ToolReference names it, not with the other tools.
    deferred: bool = False
    free_form: FreeForm | None = None  # the input is text (input_schema unused)
    namespace: str | None = None

    @property
    def local_name(self) -> str:
        """The name inside its namespace."""
        return self.name[len(self.namespace) + 1 :] if self.namespace else self.name


class ToolChoiceKind(StrEnum):
    AUTO = "auto"  # text, or tool calls
    ANY = "any"  # at least one tool call (OpenAI "required")
    NONE = "none"  # no tool call
    NAMED = "named"  # a call of the tool `name`


@dataclass(frozen=True, slots=True)
class ToolChoice:
    kind: ToolChoiceKind = ToolChoiceKind.AUTO
    name: str | None = None
    parallel: bool = True  # False: exactly one call at most


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """`json_schema` with `schema`, or `json_object` (any JSON object)."""

    kind: Literal["json_schema", "json_object"]
    schema: dict[str, Any] | None = None
    schema_path: str = ""


class ThinkingMode(StrEnum):
    DISABLED = "disabled"
    ENABLED = "enabled"  # with a budget of tokens
    ADAPTIVE = "adaptive"  # bounded only by max_tokens


@dataclass(frozen=True, slots=True)
class ThinkingConfig:
    mode: ThinkingMode = ThinkingMode.DISABLED
    budget_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Sampling:
    """`None` leaves a parameter to the engine's default. `max_tokens=None` lets the answer run to
    the end of the context window."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[int, float] | None = None
    logprobs: bool = False
    top_logprobs: int | None = None


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    model: str
    messages: tuple[Message, ...]
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    response_format: ResponseFormat | None = None
    thinking: ThinkingConfig = field(default_factory=ThinkingConfig)

    @property
    def continues_answer(self) -> bool:
        """A trailing assistant turn is the start of the answer, which the model continues."""
        return bool(self.messages) and self.messages[-1].role == "assistant"

    def images(self) -> list[Image]:
        found = []
        for message in self.messages:
            for part in message.parts:
                if isinstance(part, Image):
                    found.append(part)
                elif isinstance(part, ToolResult):
                    found.extend(p for p in part.parts if isinstance(p, Image))
        return found

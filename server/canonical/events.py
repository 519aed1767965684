"""The canonical event stream of one answer, which the protocol encoders turn into wire events or
fold into one body. Failures are raised (as `InferError`), never yielded."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FinishReason(StrEnum):
    """Richer than either protocol's, so nothing is lost in mapping."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    TOOL_USE = "tool_use"


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0  # of completion_tokens: those generated up to the reasoning's end


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A piece of the reasoning, which comes before the answer."""

    text: str


@dataclass(frozen=True, slots=True)
class ThinkingEnd:
    """The reasoning is over; the signature is opaque (an HMAC of its text)."""

    signature: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A call opens: its index among the answer's calls, a protocol-neutral id, the tool."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of the call's arguments; the fragments concatenate to its JSON object (a
    free-form call's: to its input)."""

    index: int
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    index: int
    complete: bool = True  # False: the answer ended inside its arguments (max_tokens cut them)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A generated token (or an alternative to it): its text, log probability and exact bytes
    (a token may hold part of a character, which its text cannot show)."""

    token: str
    logprob: float
    utf8: bytes
    top: tuple[TokenLogprob, ...] = ()  # the most likely tokens at its place, most likely first


@dataclass(frozen=True, slots=True)
class Logprobs:
    """The log probabilities of the tokens whose text the events after it carry."""

    tokens: tuple[TokenLogprob, ...]


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason
    usage: Usage
    stop_sequence: str | None = None  # the matched stop string, with STOP_SEQUENCE


Event = (
    TextDelta
    | ThinkingDelta
    | ThinkingEnd
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | Logprobs
    | Finish
)

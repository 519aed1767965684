"""The engine interface: prompt token ids and sampling in, text deltas and a finish out."""

from __future__ import annotations

import base64
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, Protocol

from server.canonical import Sampling


@dataclass(frozen=True, slots=True)
class EngineLimits:
    context_length: int  # the model's window, as advertised
    max_prompt_tokens: int  # the longest prompt the runtime admits
    max_total_tokens: int  # prompt and answer together, at most

    def room(self, prompt_tokens: int) -> int:
        """How many tokens an answer to this prompt may have (0: the prompt does not fit)."""
        if prompt_tokens > self.max_prompt_tokens:
            return 0
        return max(0, self.max_total_tokens - prompt_tokens)


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """The runtime's own count of its requests (all its clients'), from its load report."""

    running: int  # being decoded
    waiting: int  # queued


@dataclass(frozen=True, slots=True)
class Constraint:
    """A grammar for the answer, in one of SGLang's constraint kinds (xgrammar compiles it)."""

    kind: Literal["json_schema", "regex", "ebnf", "structural_tag"]
    value: str  # the JSON text of a schema or structural tag, or the regex / EBNF source


@dataclass(frozen=True, slots=True)
class EngineRequest:
    request_id: str  # fixed length: SGLang aborts every request whose id starts with the one given
    prompt_ids: list[int]
    sampling: Sampling  # max_tokens resolved: never None here
    constraint: Constraint | None = None
    images: tuple[bytes, ...] = ()  # PNG, in prompt order (each where the prompt's placeholder is)
    # The model's special tokens come back as text: its family writes its markup in them
    # (Mistral's [TOOL_CALLS]); otherwise they are left out of the text.
    special_tokens: bool = False

    def image_data(self) -> list[str] | None:
        """The images as SGLang's `image_data` takes them: data URLs."""
        if not self.images:
            return None
        return ["data:image/png;base64," + base64.b64encode(png).decode() for png in self.images]


class StopKind(StrEnum):
    END_OF_TURN = "end_of_turn"  # an end-of-sequence or stop token
    STOP_STRING = "stop_string"
    LENGTH = "length"


@dataclass(frozen=True, slots=True)
class EngineFinish:
    kind: StopKind
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    matched: str | None = None  # the stop string, with STOP_STRING
    queue_ms: float | None = None  # waiting in the runtime's queue, where it reports that


@dataclass(frozen=True, slots=True)
class EngineLogprob:
    token_id: int
    text: str
    logprob: float
    top: tuple[EngineLogprob, ...] = ()  # most likely first


@dataclass(frozen=True, slots=True)
class EngineOutput:
    """New text since the previous output (outputs may coalesce several tokens), and on the last
    one the finish. A stop string is never part of the text. With logprobs asked for
    (`sampling.logprobs`), those of the tokens that make up `text`."""

    text: str
    completion_tokens: int
    finish: EngineFinish | None = None
    logprobs: tuple[EngineLogprob, ...] = ()
    cached_tokens: int = 0  # of the prompt, read from the prefix cache (known from the first)


class Engine(Protocol):
    """A model runtime. `generate` raises `InferError` subclasses only; closing its iterator
    before the finish aborts the request in the runtime."""

    @property
    def limits(self) -> EngineLimits:
        """Known once `start()` returned."""
        ...

    @property
    def is_ready(self) -> bool: ...

    @property
    def unsupported_sampling(self) -> Mapping[str, str]:
        """Sampling parameters the runtime cannot honour (`seed`, `logit_bias`), each with why: a
        request that sets one is refused, never silently served without it. Known once
        `start()` returned."""
        ...

    @property
    def running_requests(self) -> int:
        """This server's requests at the runtime (queued or decoding)."""
        ...

    async def load(self) -> EngineLoad | None:
        """The runtime's load report, where it gives one (None where it does not)."""
        ...

    @property
    def restarts(self) -> int:
        """Times this server restarted the runtime after it died (0 where it does not run it)."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]: ...

"""The canonical generation request: what both protocols decode into, validated and typed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class Text:
    text: str


Part = Text


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    parts: tuple[Part, ...]

    @property
    def text(self) -> str:
        return "".join(part.text for part in self.parts)


@dataclass(frozen=True, slots=True)
class Sampling:
    """`None` leaves a parameter to the engine's default. `max_tokens=None` lets the answer run to
    the end of the context window."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    model: str
    messages: tuple[Message, ...]
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False

    @property
    def continues_answer(self) -> bool:
        """A trailing assistant turn is the start of the answer, which the model continues."""
        return bool(self.messages) and self.messages[-1].role == "assistant"

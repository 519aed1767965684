"""Folding an event stream into one answer: how a non-streaming response is built, from the very
events a stream would have sent, so the two cannot drift."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass

from server.canonical.events import (
    Event,
    Finish,
    Logprobs,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    TokenLogprob,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from server.canonical.request import Text, Thinking, ToolCall

Block = Text | Thinking | ToolCall


@dataclass(frozen=True, slots=True)
class Answer:
    content: tuple[Block, ...]  # in the order the model wrote them
    finish: Finish
    logprobs: tuple[TokenLogprob, ...] = ()  # each generated token's, when asked for
    cut_call: bool = False  # the last tool call ended inside its arguments

    @property
    def text(self) -> str:
        return "".join(part.text for part in self.content if isinstance(part, Text))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(part for part in self.content if isinstance(part, ToolCall))

    @property
    def reasoning(self) -> str | None:
        texts = [part.text for part in self.content if isinstance(part, Thinking)]
        return "".join(texts) if texts else None


async def fold(events: AsyncGenerator[Event, None]) -> Answer:
    content: list[Block] = []
    pieces: list[str] = []  # the part being written: text, reasoning, or a call's arguments
    thinking: list[str] = []
    call: ToolCallStart | None = None
    logprobs: list[TokenLogprob] = []
    cut_call = False
    async with aclosing(events):
        async for event in events:
            if isinstance(event, Logprobs):
                logprobs.extend(event.tokens)
            elif isinstance(event, TextDelta):
                pieces.append(event.text)
            elif isinstance(event, ThinkingDelta):
                thinking.append(event.text)
            elif isinstance(event, ThinkingEnd):
                content.append(Thinking("".join(thinking), event.signature))
                thinking.clear()
            elif isinstance(event, ToolCallStart):
                _flush_text(content, pieces)
                call = event
            elif isinstance(event, ToolCallDelta):
                pieces.append(event.arguments)
            elif isinstance(event, ToolCallEnd) and call is not None:
                content.append(ToolCall(call.id, call.name, "".join(pieces)))
                pieces.clear()
                call = None
                cut_call = not event.complete
            elif isinstance(event, Finish):
                _flush_text(content, pieces)
                return Answer(tuple(content), event, tuple(logprobs), cut_call)
    raise RuntimeError("the event stream ended without a finish")


def _flush_text(content: list[Block], pieces: list[str]) -> None:
    if pieces:
        content.append(Text("".join(pieces)))
        pieces.clear()

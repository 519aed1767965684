"""Folding an event stream into one answer: how a non-streaming response is built, from the very
events a stream would have sent, so the two cannot drift."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass

from server.canonical.events import Event, Finish, TextDelta


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    finish: Finish


async def fold(events: AsyncGenerator[Event, None]) -> Answer:
    pieces: list[str] = []
    async with aclosing(events):
        async for event in events:
            if isinstance(event, TextDelta):
                pieces.append(event.text)
            elif isinstance(event, Finish):
                return Answer("".join(pieces), event)
    raise RuntimeError("the event stream ended without a finish")

"""The `replay` engine: no model, a fixed stream of word-sized pieces as fast as the event loop
takes them. What remains of a request's time through the server is the front end's own cost:
`python -m bench overhead` measures it. Tokenizer, templates and parsing are the real ones.
`--replay-hold-after N` holds every answer after N pieces: tests kill the server there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping

from server.config import Settings
from server.engines.base import (
    EngineFinish,
    EngineLimits,
    EngineLoad,
    EngineOutput,
    EngineRequest,
    StopKind,
)
from server.models.source import ModelSource

PASSAGE = (
    "The lighthouse keeper climbed the stairs at dusk and lit the lamp, as every evening, "
    "while the sea below turned from grey to black and the first boats came home. "
)
PIECES = tuple(word + " " for word in PASSAGE.split())
# Without a model the answer's natural end is arbitrary: this many pieces, unless max_tokens.
ANSWER_PIECES = 256
CONTEXT = 8192


class ReplayEngine:
    def __init__(self, settings: Settings, source: ModelSource) -> None:
        del source
        context = settings.context_length or CONTEXT
        self._limits = EngineLimits(context, context - 1, context)
        self._hold_after = settings.replay_hold_after
        self._running = 0

    @property
    def limits(self) -> EngineLimits:
        return self._limits

    @property
    def unsupported_sampling(self) -> Mapping[str, str]:
        return {"seed": "the replay engine does not sample"}

    @property
    def is_ready(self) -> bool:
        return True

    @property
    def running_requests(self) -> int:
        return self._running

    @property
    def restarts(self) -> int:
        return 0  # nothing to restart

    async def load(self) -> EngineLoad | None:
        return EngineLoad(self._running, 0)  # every request runs at once

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        wanted = request.sampling.max_tokens or ANSWER_PIECES
        count = min(wanted, ANSWER_PIECES)
        kind = StopKind.LENGTH if wanted <= ANSWER_PIECES else StopKind.END_OF_TURN
        prompt = len(request.prompt_ids)
        self._running += 1
        try:
            for index in range(count - 1):
                await self._held(index)
                yield EngineOutput(PIECES[index % len(PIECES)], index + 1)
                await asyncio.sleep(0)  # a real engine's outputs arrive between loop turns
            await self._held(count - 1)
            finish = EngineFinish(kind, prompt, count)
            yield EngineOutput(PIECES[(count - 1) % len(PIECES)], count, finish)
        finally:
            self._running -= 1

    async def _held(self, pieces: int) -> None:
        """With --replay-hold-after N, forever once N pieces are out (until the request is
        aborted)."""
        if pieces == self._hold_after:
            await asyncio.Event().wait()

"""A scripted engine, for what the real model cannot be made to do on demand (fail mid-stream,
refuse before its first token), served by the real app on a real Hypercorn listener."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field

from hypercorn.asyncio import serve

from server.app import create_app
from server.config import Settings
from server.engines.base import (
    EngineFinish,
    EngineLimits,
    EngineLoad,
    EngineOutput,
    EngineRequest,
    StopKind,
)
from server.errors import InferError
from server.images.loader import ImageLoader
from server.models.source import ModelSource
from server.serve import hypercorn_config
from server.state import ServerState
from server.tokenizer import Tokenizer

Step = EngineOutput | InferError | Exception


def text(piece: str, tokens: int) -> EngineOutput:
    return EngineOutput(piece, tokens)


def end(prompt_tokens: int, tokens: int) -> EngineOutput:
    return EngineOutput("", tokens, EngineFinish(StopKind.END_OF_TURN, prompt_tokens, tokens))


@dataclass
class ScriptedEngine:
    """Plays one script per request, in the order they were queued."""

    scripts: deque[list[Step]] = field(default_factory=deque)
    limits: EngineLimits = field(default_factory=lambda: EngineLimits(8192, 8185, 8190))
    is_ready: bool = True
    unsupported_sampling: dict[str, str] = field(default_factory=dict)
    running_requests: int = 0
    requests: list[EngineRequest] = field(default_factory=list)  # what reached the engine

    @property
    def restarts(self) -> int:
        return 0  # scripted

    async def load(self) -> EngineLoad | None:
        return EngineLoad(self.running_requests, 0)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        self.requests.append(request)
        for step in self.scripts.popleft():
            if isinstance(step, Exception):
                raise step
            await asyncio.sleep(0)
            yield step


class ScriptedServer:
    """The real app and Hypercorn in a background thread with its own event loop."""

    def __init__(
        self, settings: Settings, *, vision: bool = False, images: ImageLoader | None = None
    ) -> None:
        self.engine = ScriptedEngine()
        self.settings = settings
        self._vision = vision
        self._images = images
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.state: ServerState | None = None

    def _factory(
        self, settings: Settings, source: ModelSource, tokenizer: Tokenizer
    ) -> ScriptedEngine:
        return self.engine

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        state = ServerState(
            self.settings,
            engine_factory=self._factory,
            on_engine_started=self._ready.set,
            on_start_failed=lambda code: self._ready.set(),
            vision=self._vision,
        )
        if self._images is not None:
            state.images = self._images
        self.state = state
        app = create_app(self.settings, state)
        await serve(app, hypercorn_config(self.settings), shutdown_trigger=self._stop.wait)

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        if not self._ready.wait(timeout=300) or self.state is None or not self.state.is_ready:
            raise RuntimeError("scripted server did not start (see the log)")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=60)

    def play(self, *steps: Step) -> None:
        self.engine.scripts.append(list(steps))

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"


def scripted_server(
    settings: Settings, *, vision: bool = False, images: ImageLoader | None = None
) -> Iterator[ScriptedServer]:
    with ScriptedServer(settings, vision=vision, images=images) as server:
        yield server

"""Everything a running server holds, on the app object (no module-level state): settings, the
engine and what it serves, the request log, the id generator."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from quart import current_app

from grammars import ModelFamily, ModelFormat, UnknownFormat, format_of
from grammars.libraries import LibraryMismatch
from grammars.prompt import PromptRenderer
from server.auth.principal import OPEN_ORG, Authenticator
from server.config import Settings
from server.engines.base import Engine
from server.engines.registry import EngineFactory, create_engine, prepare_engine
from server.errors import BackendUnavailable
from server.gateway.client import GatewayClient
from server.gateway.generation import GatewayGeneration
from server.generation import Generation
from server.ids import RequestIds
from server.images.egress import EgressGuard
from server.images.loader import ImageLoader
from server.models.card import ModelCard, has_vision, sampling_defaults
from server.models.embedded import ModelSetupError
from server.models.source import ModelSource, resolve
from server.node.admission import Admission
from server.node.limits import load as load_limits
from server.node.metering import Meter
from server.node.metrics import Metrics
from server.protocols.anthropic.options import DecodeOptions
from server.protocols.responses.tools import ResponsesOptions
from server.requestlog import RequestLog
from server.store.base import Bounds, Store
from server.store.responses import MemoryResponses, ResponseStore, StoreResponses
from server.store.sqlite import SqliteStore
from server.store.writer import StoreWriter
from server.tokenizer import Tokenizer, load_tokenizer

log = logging.getLogger(__name__)

EXTENSION = "b3os"
STARTING_RETRY_AFTER = 5
STORE_RETRY_AFTER = 10


@dataclass(slots=True)
class ServerState:
    settings: Settings
    ids: RequestIds = field(default_factory=RequestIds)
    requests: RequestLog = field(default_factory=RequestLog)
    source: ModelSource | None = None
    engine: Engine | None = None
    generation: Generation | None = None
    decode_options: DecodeOptions = field(default_factory=DecodeOptions)
    engine_factory: EngineFactory = create_engine
    images: ImageLoader = field(default_factory=lambda: ImageLoader(EgressGuard()))
    vision: bool | None = None  # the model takes images; None: as its config says
    # Called once the engine runs (the server's signal handlers are put in place again then,
    # whatever the runtime's start did to them); and with an exit code when the start fails.
    on_engine_started: Callable[[], None] = lambda: None
    on_start_failed: Callable[[int], None] = lambda code: None
    # Running as a node: keys, limits, metering, metrics (built from the settings).
    store: Store | None = field(init=False, default=None)
    # The store's one writer: metering, the request log, kept responses.
    writer: StoreWriter | None = field(init=False, default=None)
    responses: ResponseStore = field(init=False)  # the Responses API's kept responses
    auth: Authenticator = field(init=False)
    admission: Admission = field(init=False)
    meter: Meter = field(init=False)
    metrics: Metrics = field(init=False, default_factory=Metrics)
    gateway: GatewayGeneration | None = field(init=False, default=None)  # route: gateway

    def __post_init__(self) -> None:
        """Raises `LimitsFileError` for a bad limits file, `sqlite3.Error` for a bad store."""
        self.admission = Admission(load_limits(self.settings.limits))
        bounds = Bounds.of(self.settings.response_store_mb, self.settings.response_store_days)
        if self.settings.db is not None:
            self.store = SqliteStore(self.settings.db, bounds)
            self.writer = StoreWriter(self.store)
            self.requests = RequestLog(writer=self.writer)
            self.responses = StoreResponses(self.writer, bounds)
        else:
            self.responses = MemoryResponses(bounds)
        self.auth = Authenticator(self.store)
        self.meter = Meter(self.writer)
        settings = self.settings
        if settings.gateway_url is not None:
            client = GatewayClient(
                settings.gateway_url,
                settings.gateway_api_key,
                timeout=settings.gateway_timeout,
                connect_timeout=settings.gateway_connect_timeout,
            )
            self.gateway = GatewayGeneration(client, settings.gateway_models)

    async def start(self) -> None:
        """Model, tokenizer, engine, in that order; the HTTP side serves health checks meanwhile."""
        started = time.monotonic()
        if self.writer is not None:
            interrupted = self.writer.start()
            if interrupted:
                log.warning(
                    "metering: %d requests of a previous run were cut short; billed to their "
                    "last reserved tokens",
                    interrupted,
                )
        if self.auth.is_open:
            log.warning(
                "NO KEY STORE (--db): this node runs OPEN. Every request is served without a "
                "key, for the organization %r, and nothing is metered",
                OPEN_ORG,
            )
        else:
            log.info("keys and metering: %s", self.settings.db)
        try:
            await asyncio.to_thread(prepare_engine, self.settings)
            self.source = await asyncio.to_thread(resolve, self.settings)
            tokenizer = await asyncio.to_thread(load_tokenizer, self.source.path)
            form = await asyncio.to_thread(_format, self.source.served_name, tokenizer)
            family = form.family
            engine = self.engine_factory(self.settings, self.source, tokenizer)
            self.engine = engine
            await engine.start()
        except asyncio.CancelledError:
            raise
        except ModelSetupError as error:
            log.error("cannot start: %s", error)
            self.on_start_failed(1)
            return
        except BaseException:
            log.exception("the model runtime failed to start")
            self.on_start_failed(1)
            return
        capabilities: tuple[str, ...] = ("chat", "streaming", "json_output")
        capabilities += ("tools",) if family.has_tools else ()
        capabilities += ("thinking",) if form.reasoning else ()
        vision = self.vision if self.vision is not None else has_vision(self.source.path)
        if vision and family.image is None:
            log.warning(
                "%s has a vision part, but its chat format has no image placement "
                "known here: images are refused",
                self.source.served_name,
            )
        capabilities += ("image_input",) if vision and family.image else ()
        card = ModelCard(
            id=self.source.served_name,
            context_length=engine.limits.context_length,
            max_request_bytes=self.settings.max_request_bytes,
            created=int(time.time()),
            owned_by=self.settings.node_name,
            capabilities=capabilities,
            sampling_defaults=sampling_defaults(self.source.path),
            default_max_tokens=self.settings.default_max_tokens,
            max_output_tokens=self.settings.max_output_tokens,
            family=family.name,
            tool_format=family.tool_parser,
            reasoning=form.reasoning is not None,
            reasoning_parser=form.reasoning.parser if form.reasoning else None,
        )
        if card.sampling_defaults:
            log.info("sampling left unset follows the model's: %s", card.sampling_defaults)
        self.decode_options = self._decode_options(family)
        renderer = PromptRenderer(tokenizer, form)
        self.generation = Generation(
            engine,
            renderer,
            card,
            secrets.token_bytes(32),
        )
        self.on_engine_started()
        log.info(
            "serving %s (chat format %s, tool calls %s, reasoning %s), ready in %.1f s",
            card.id,
            family.name,
            card.tool_format or "none",
            card.reasoning_parser or "none",
            time.monotonic() - started,
        )

    def _decode_options(self, family: ModelFamily) -> DecodeOptions:
        claude_code = self.settings.compat_with("claude-code")
        keep = self.settings.system_in_messages == "keep" or claude_code
        if keep and not family.system_anywhere:
            log.warning(
                "--system-in-messages keep: the %s chat format cannot hold a system turn past "
                "the first, so such messages are refused",
                family.name,
            )
        return DecodeOptions(
            "keep" if keep and family.system_anywhere else "refuse",
            tool_search=claude_code,
            safeguards=claude_code,
            attribution=claude_code,
        )

    async def close(self) -> None:
        if self.engine is not None:
            log.info("stopping the model runtime")
            await self.engine.close()
        if self.gateway is not None:
            await self.gateway.close()
        if self.writer is not None:
            await self.writer.close()
        if self.store is not None:
            self.store.close()

    @property
    def responses_options(self) -> ResponsesOptions:
        return ResponsesOptions(drop_hosted_tools=self.settings.compat_with("codex"))

    @property
    def is_ready(self) -> bool:
        return self.generation is not None

    def check_store_room(self) -> None:
        """503 while the store's writer is full (the store takes no writes): a request is
        admitted only where its metering record and log entry can wait to be written."""
        if self.writer is not None and self.writer.is_full:
            raise BackendUnavailable(
                f"{self.settings.node_name} cannot record requests now (its store takes no "
                f"writes); retry in {STORE_RETRY_AFTER} seconds",
                retry_after=STORE_RETRY_AFTER,
            )

    def ready(self) -> Generation:
        """The generation service, or 503 while the runtime starts."""
        if self.generation is None:
            raise BackendUnavailable(
                f"the model runtime on {self.settings.node_name} is starting; "
                f"retry in {STARTING_RETRY_AFTER} seconds",
                retry_after=STARTING_RETRY_AFTER,
            )
        return self.generation


def _format(model: str, tokenizer: Tokenizer) -> ModelFormat:
    """The model's chat format, from its own template and vocabulary; one in no known format
    stops the start."""
    try:
        return format_of(tokenizer)
    except UnknownFormat as error:
        raise ModelSetupError(f"{model}: {error}") from None
    except LibraryMismatch as error:
        raise ModelSetupError(str(error)) from None


def server_state() -> ServerState:
    state: ServerState = current_app.extensions[EXTENSION]
    return state

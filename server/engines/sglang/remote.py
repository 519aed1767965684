"""The `sglang-remote` engine: the in-process engine's mapping over SGLang's native HTTP API, to
one SGLang server or to `sglang-router` in front of many (`topology.py` tells which). Token ids
in (`POST /generate`, streaming) over one pooled HTTP client; what it must know of the runtime is
learned at start (`facts.py`); a client that goes away is aborted at the worker at once; health
is checked every few seconds. The runtime being unreachable, failing or overloaded is a 503
`infer_backend_unavailable` with `Retry-After`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx

from server.config import Settings
from server.engines.base import EngineLimits, EngineLoad, EngineOutput, EngineRequest
from server.engines.sglang.args import logprob_options, to_sampling_params
from server.engines.sglang.carriage import Carriage, probe_router
from server.engines.sglang.ebnf import EbnfConstraints
from server.engines.sglang.facts import (
    PROBES,
    Learned,
    WorkerInfo,
    cumulative_of,
    limits_of,
    model_mismatch,
    probe_ids,
    seeded_of,
)
from server.engines.sglang.outputs import error_of
from server.engines.sglang.stream import StreamReader, sse_chunks
from server.engines.sglang.topology import Topology
from server.errors import BackendUnavailable, InferError
from server.models.embedded import ModelSetupError
from server.tokenizer import Tokenizer

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
HEALTHY_INTERVAL_S = 5.0  # between health checks while the runtime answers
UNHEALTHY_INTERVAL_S = 1.0  # and while it does not
START_LOG_INTERVAL_S = 15.0
RETRY_AFTER_S = 5  # the runtime is down
ROUTED_RETRY_AFTER_S = 1  # one worker behind a router failed: the router moves to another
ABORT_DELIVERY_S = 5.0  # at close, for aborts still on their way
MAX_CONNECTIONS = 1024  # streams in flight at once (SGLang's server takes many more)


class SGLangRemoteEngine:
    def __init__(
        self,
        settings: Settings,
        tokenizer: Tokenizer,  # this server's: the workers must render and tokenize as it does
        *,
        transport: httpx.AsyncBaseTransport | None = None,  # tests: a runtime SGLang cannot be
    ) -> None:
        assert settings.engine_url is not None  # checked with the settings
        self._url = settings.engine_url.rstrip("/")
        self._settings = settings
        self._tokenizer = tokenizer
        self._probes = [probe_ids(tokenizer, chat) for chat in PROBES]
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._topology: Topology | None = None
        self._ebnf: EbnfConstraints | None = None  # behind a router: grammars go as EBNF
        self._limits = EngineLimits(0, 0, 0)
        self._cumulative: bool | None = None  # what the workers say of their streams
        self._checked: set[str] = set()  # workers whose model was compared with this one
        self._ready = False
        self._unsupported: dict[str, str] = {}
        self._running = 0
        self._recheck = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None  # the health checks
        self._aborts: set[asyncio.Task[None]] = set()  # in flight

    @property
    def limits(self) -> EngineLimits:
        return self._limits

    @property
    def unsupported_sampling(self) -> Mapping[str, str]:
        return self._unsupported

    @property
    def is_ready(self) -> bool:
        return self._ready

    @property
    def running_requests(self) -> int:
        return self._running

    @property
    def restarts(self) -> int:
        return 0  # the remote runtime is restarted by whoever runs it

    async def load(self) -> EngineLoad | None:
        return None if self._topology is None else await self._topology.load()

    async def start(self) -> None:
        """Waits for the runtime to answer (it may be starting too), learns what it must know
        of it, refuses workers that serve another model, then watches its health."""
        headers = {}
        if self._settings.engine_api_key:
            headers["Authorization"] = f"Bearer {self._settings.engine_api_key}"
        self._client = httpx.AsyncClient(
            base_url=self._url,
            headers=headers,
            timeout=httpx.Timeout(self._settings.engine_timeout, connect=CONNECT_TIMEOUT_S),
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=64),
            transport=self._transport,
        )
        topology = self._topology = Topology(self._client, self._url)
        log.info("model runtime: SGLang at %s", self._url)
        workers = await self._wait_for_runtime(topology)
        await self._check_models(topology, [worker.url for worker in workers])
        limits = limits_of(workers, self._settings, self._url)
        seeded = seeded_of(workers, self._settings.deterministic_sampling)
        self._limits = limits.value
        if not seeded.value:
            self._unsupported["seed"] = (
                f"this node's runtime samples without seeds ({seeded.source})"
            )
        carried = await self._carriage(topology)
        if not carried.structural_tag:
            self._ebnf = EbnfConstraints()
        if not carried.logit_bias:
            self._unsupported["logit_bias"] = f"the router at {self._url} does not carry it"
        self._cumulative = cumulative_of(workers)
        self._ready = True
        self._watch = asyncio.get_running_loop().create_task(self._watch_health())
        _report(topology, workers, limits, seeded, carried)

    async def close(self) -> None:
        """Aborts still on their way are delivered (for a few seconds) before the client goes."""
        self._ready = False
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        if self._aborts:
            await asyncio.wait(self._aborts, timeout=ABORT_DELIVERY_S)
        if self._client is not None:
            await self._client.aclose()

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        client = self._client
        if client is None:
            raise BackendUnavailable("the model runtime is starting; retry shortly", retry_after=5)
        constraint = request.constraint
        if self._ebnf is not None:
            constraint = self._ebnf.routable(constraint)
        body: dict[str, Any] = {
            "input_ids": request.prompt_ids,
            "sampling_params": to_sampling_params(
                request.sampling, constraint, request.special_tokens
            ),
            "stream": True,
            "rid": request.request_id,
            **logprob_options(request.sampling),
        }
        if request.images:
            body["image_data"] = request.image_data()
        self._running += 1
        finished = False
        try:
            async with client.stream("POST", "/generate", json=body) as response:
                if response.status_code != httpx.codes.OK:
                    raise await self._status_error(response, request)
                reader = StreamReader(request, self._cumulative)
                async for chunk in sse_chunks(response):
                    output = reader.read(chunk)
                    finished = output.finish is not None
                    yield output
                    if finished:
                        break
            if not finished:
                self._lost("ended the stream before the answer's end")
                raise BackendUnavailable(
                    "the model runtime ended this answer early; retry shortly", retry_after=1
                )
        except httpx.TimeoutException as exc:
            raise BackendUnavailable(
                f"the model runtime sent nothing for {self._settings.engine_timeout:.0f} s; "
                f"retry in {RETRY_AFTER_S} seconds",
                retry_after=RETRY_AFTER_S,
            ) from exc
        except httpx.TransportError as exc:  # refused, reset, closed mid-stream
            self._lost(f"{type(exc).__name__}: {exc}")
            retry = self._retry_after()
            raise BackendUnavailable(
                f"the model runtime on {self._settings.node_name} is unreachable; "
                f"retry in {retry} seconds",
                retry_after=retry,
            ) from exc
        finally:
            self._running -= 1
            if not finished:
                abort = asyncio.get_running_loop().create_task(self._abort(request.request_id))
                self._aborts.add(abort)
                abort.add_done_callback(self._aborts.discard)

    async def _status_error(self, response: httpx.Response, request: EngineRequest) -> InferError:
        await response.aread()
        message = _error_message(response)
        if response.status_code == httpx.codes.TOO_MANY_REQUESTS:
            retry_after = _seconds(response.headers.get("retry-after")) or 1
            return BackendUnavailable(
                f"the model runtime is overloaded; retry in {retry_after} seconds",
                retry_after=retry_after,
            )
        if response.status_code >= httpx.codes.INTERNAL_SERVER_ERROR:
            self._lost(f"HTTP {response.status_code}: {message}")
            retry = self._retry_after()
            return BackendUnavailable(
                f"the model runtime is unavailable; retry in {retry} seconds", retry_after=retry
            )
        status = response.status_code
        log.error("SGLang refused %s: HTTP %d %s", request.request_id, status, message)
        return error_of(response.status_code, message, request)

    async def _carriage(self, topology: Topology) -> Carriage:
        """What the router passes on to its workers, probed; SGLang itself takes everything."""
        if not topology.is_router:
            return Carriage(structural_tag=True, logit_bias=True)
        assert self._client is not None
        return await probe_router(self._client, self._probes[-1], self._tokenizer)

    def _retry_after(self) -> int:
        routed = self._topology is not None and self._topology.is_router
        return ROUTED_RETRY_AFTER_S if routed else RETRY_AFTER_S

    async def _abort(self, request_id: str) -> None:
        """Closing the stream lets SGLang (or the router) notice the disconnect; this tells the
        worker at once."""
        if self._topology is not None:
            await self._topology.abort(request_id)
            log.debug("aborted %s", request_id)

    def _lost(self, reason: str) -> None:
        """A request failed at the runtime: check its health now. One SGLang server is taken
        as down at once; behind a router, the others may still serve."""
        routed = self._topology is not None and self._topology.is_router
        if self._ready and not routed:
            log.warning("SGLang at %s: %s; not ready until it answers again", self._url, reason)
            self._ready = False
        elif routed:
            log.warning("a request through %s failed: %s", self._url, reason)
        self._recheck.set()

    async def _watch_health(self) -> None:
        assert self._topology is not None
        while True:
            interval = HEALTHY_INTERVAL_S if self._ready else UNHEALTHY_INTERVAL_S
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation that
            # arrives as the event is set, and the watch would outlive close().
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._recheck.wait()
            self._recheck.clear()
            try:
                healthy = await self._topology.healthy()
            except Exception:  # any one check's failure, never the watch's end: readiness
                # would stay false for good, silently (the task's error is never retrieved)
                log.exception("checking %s failed", self._topology.describe())
                healthy = False
            if healthy and not self._ready:
                log.info("%s answers again: ready", self._topology.describe())
            elif not healthy and self._ready:
                log.warning("%s cannot generate: not ready", self._topology.describe())
            self._ready = healthy
            if healthy and self._topology.reachable:
                await self._check_newcomers(self._topology)

    async def _wait_for_runtime(self, topology: Topology) -> list[WorkerInfo]:
        """What the workers say of themselves, once at least one can generate (behind a router
        this server does not reach the workers of: once the router holds one healthy)."""
        started = last_log = time.monotonic()
        while True:
            if await topology.refresh():
                infos = await topology.server_infos()
                workers = [
                    worker
                    for url, info in infos.items()
                    if (worker := WorkerInfo.parse(url, info)) is not None
                ]
                if (workers or not topology.reachable) and await topology.healthy():
                    return workers
            if time.monotonic() - last_log >= START_LOG_INTERVAL_S:
                last_log = time.monotonic()
                log.info(
                    "waiting for %s to generate (%.0f s so far)",
                    topology.describe(),
                    last_log - started,
                )
            await asyncio.sleep(UNHEALTHY_INTERVAL_S)

    async def _check_models(self, topology: Topology, urls: list[str]) -> None:
        """Refuses to start on workers that render or tokenize the probe chat otherwise."""
        for url in urls:
            problem = await self._mismatch(topology, url)
            if problem is not None:
                raise ModelSetupError(problem)
        unchecked = [url for url in urls if url not in self._checked] or (
            [] if topology.reachable else list(topology.urls)
        )
        if unchecked:
            log.warning(
                "not checked to serve this server's model (no /v1/tokenize answered): %s",
                ", ".join(unchecked),
            )

    async def _check_newcomers(self, topology: Topology) -> None:
        """Workers a router lists after the start are compared too; a mismatch is logged (this
        server cannot stop the router from using them)."""
        for url in topology.urls:
            if url not in self._checked:
                problem = await self._mismatch(topology, url)
                if problem is not None:
                    log.error("%s: its answers through %s will be wrong", problem, self._url)

    async def _mismatch(self, topology: Topology, url: str) -> str | None:
        for chat, ours in zip(PROBES, self._probes, strict=True):
            body = {"messages": chat, "add_generation_prompt": True}
            theirs = await topology.tokenize(url, body)
            if theirs is None:
                log.debug("%s does not render chats for this server to compare", url)
                return None  # not checked: a worker still starting, or without /v1/tokenize
            problem = model_mismatch(url, ours, theirs)
            if problem is not None:
                return problem
        self._checked.add(url)
        log.info("%s renders and tokenizes chats as this server does", url)
        return None


def _report(
    topology: Topology,
    workers: list[WorkerInfo],
    limits: Learned[EngineLimits],
    seeded: Learned[bool],
    carried: Carriage,
) -> None:
    """The start-time account of what was learned, and where from."""
    versions = sorted({worker.version for worker in workers}) or ["not asked"]
    log.info("%s ready (SGLang %s)", topology.describe(), ", ".join(versions))
    log.info(
        "context %d tokens, prompts up to %d: from %s",
        limits.value.context_length,
        limits.value.max_prompt_tokens,
        limits.source,
    )
    log.info("seeds %s: from %s", "honoured" if seeded.value else "refused", seeded.source)
    log.info("streamed text: deltas or the whole text so far, told by each stream")
    if topology.is_router:
        log.info(
            "the router carries structural tags: %s (else grammars go as EBNF); logit_bias: "
            "%s (else refused)",
            "yes" if carried.structural_tag else "no",
            "yes" if carried.logit_bias else "no",
        )
    if topology.reachable:
        log.info("aborts, readiness and load: asked of each worker")
    else:
        log.warning(
            "the workers do not answer this server: an abort is the closed stream, "
            "readiness the router's view of its workers, and the runtime's load unknown"
        )


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def _seconds(value: str | None) -> int | None:
    try:
        return max(1, int(float(value))) if value else None
    except ValueError:
        return None

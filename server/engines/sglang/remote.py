"""The `sglang-remote` engine: the in-process engine's mapping over SGLang's native HTTP API, to
one SGLang server or to `sglang-router` in front of many. Token ids in (`POST /generate`,
streaming), `POST /abort_request` when a client goes away, `GET /health_generate` for readiness,
over one pooled HTTP client. The remote being unreachable, failing or overloaded is a 503
`infer_backend_unavailable` with `Retry-After`, and readiness turns false until it answers again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx

from server.config import Settings
from server.engines.base import EngineLimits, EngineOutput, EngineRequest
from server.engines.sglang.args import logprob_options, to_sampling_params
from server.engines.sglang.outputs import error_of, finish_of, limits, logprobs_of
from server.errors import BackendUnavailable, InferError
from server.models.card import folder_config
from server.models.embedded import ModelSetupError
from server.models.source import ModelSource

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
CONTROL_TIMEOUT_S = 30.0  # health checks, server info, aborts (SGLang's health check takes 1-20 s)
HEALTHY_INTERVAL_S = 5.0  # between health checks while the remote answers
UNHEALTHY_INTERVAL_S = 1.0  # and while it does not
START_LOG_INTERVAL_S = 15.0
RETRY_AFTER_S = 5
MAX_CONNECTIONS = 1024  # streams in flight at once (SGLang's server takes many more)


class SGLangRemoteEngine:
    def __init__(self, settings: Settings, source: ModelSource) -> None:
        assert settings.engine_url is not None  # checked with the settings
        self._url = settings.engine_url.rstrip("/")
        self._settings = settings
        self._source = source
        self._client: httpx.AsyncClient | None = None
        self._limits = EngineLimits(0, 0, 0)
        self._cumulative_text = False  # SGLang streams the whole text so far unless told not to
        self._ready = False
        self._seeded = False
        self._running = 0
        self._recheck = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()  # the health watch, aborts in flight

    @property
    def limits(self) -> EngineLimits:
        return self._limits

    @property
    def seeded(self) -> bool:
        """Whether the remote runs SGLang's deterministic inference, as its server info says."""
        return self._seeded

    @property
    def is_ready(self) -> bool:
        return self._ready

    @property
    def running_requests(self) -> int:
        """Requests this server has in flight at the remote."""
        return self._running

    async def queue_depth(self) -> int | None:
        """The remote's waiting queue, from its live load report (a router may not give one)."""
        if self._client is None:
            return None
        try:
            response = await self._client.get(
                "/v1/loads", params={"include": "core"}, timeout=CONTROL_TIMEOUT_S
            )
            loads = response.json()["loads"]
            return sum(int(load["num_waiting_reqs"]) for load in loads)
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    async def start(self) -> None:
        """Waits for the remote to answer (it may be starting too), learns its limits and how it
        streams, then watches its health."""
        headers = {}
        if self._settings.engine_api_key:
            headers["Authorization"] = f"Bearer {self._settings.engine_api_key}"
        self._client = httpx.AsyncClient(
            base_url=self._url,
            headers=headers,
            timeout=httpx.Timeout(self._settings.engine_timeout, connect=CONNECT_TIMEOUT_S),
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=64),
        )
        log.info("model runtime: SGLang at %s", self._url)
        info = await self._wait_for_remote()
        self._limits = self._limits_from(info)
        self._cumulative_text = not info.get("incremental_streaming_output", False)
        self._seeded = bool(info.get("enable_deterministic_inference", False))
        if not self._seeded:
            log.warning(
                "SGLang at %s runs without --enable-deterministic-inference: requests with a "
                "seed are refused",
                self._url,
            )
        self._ready = True
        self._spawn(self._watch_health())
        log.info(
            "SGLang at %s ready (version %s): context %d tokens, prompts up to %d",
            self._url,
            info.get("version", "unknown"),
            self._limits.context_length,
            self._limits.max_prompt_tokens,
        )

    async def close(self) -> None:
        self._ready = False
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        client = self._client
        if client is None:
            raise BackendUnavailable("the model runtime is starting; retry shortly", retry_after=5)
        body: dict[str, Any] = {
            "input_ids": request.prompt_ids,
            "sampling_params": to_sampling_params(request.sampling, request.constraint),
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
                text_so_far = ""
                logprobs_so_far = 0
                async for chunk in _chunks(response):
                    if "error" in chunk:
                        error = chunk["error"]
                        raise error_of(error.get("code"), str(error.get("message")), request)
                    meta = chunk["meta_info"]
                    text = chunk.get("text") or ""
                    skip = 0
                    if self._cumulative_text:
                        text, text_so_far = text[len(text_so_far) :], text
                        skip = logprobs_so_far
                        logprobs_so_far = len(meta.get("output_token_logprobs") or ())
                    finish = finish_of(meta, request)
                    finished = finish is not None
                    logprobs = logprobs_of(meta, finish, skip)
                    yield EngineOutput(text, int(meta["completion_tokens"]), finish, logprobs)
                    if finished:
                        break
            self._ready = True
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
            raise BackendUnavailable(
                f"the model runtime on {self._settings.node_name} is unreachable; "
                f"retry in {RETRY_AFTER_S} seconds",
                retry_after=RETRY_AFTER_S,
            ) from exc
        finally:
            self._running -= 1
            if not finished:
                self._spawn(self._abort(request.request_id))

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
            return BackendUnavailable(
                f"the model runtime is unavailable; retry in {RETRY_AFTER_S} seconds",
                retry_after=RETRY_AFTER_S,
            )
        status = response.status_code
        log.error("SGLang refused %s: HTTP %d %s", request.request_id, status, message)
        return error_of(response.status_code, message, request)

    async def _abort(self, request_id: str) -> None:
        """Closing the stream lets SGLang notice the disconnect; this tells it at once."""
        assert self._client is not None
        try:
            await self._client.post(
                "/abort_request", json={"rid": request_id}, timeout=CONTROL_TIMEOUT_S
            )
        except httpx.HTTPError as exc:
            log.debug("abort of %s not delivered: %s", request_id, exc)
        else:
            log.debug("aborted %s", request_id)

    def _lost(self, reason: str) -> None:
        if self._ready:
            log.warning("SGLang at %s: %s; not ready until it answers again", self._url, reason)
        self._ready = False
        self._recheck.set()

    async def _watch_health(self) -> None:
        while True:
            interval = HEALTHY_INTERVAL_S if self._ready else UNHEALTHY_INTERVAL_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._recheck.wait(), timeout=interval)
            self._recheck.clear()
            healthy = await self._healthy()
            if healthy and not self._ready:
                log.info("SGLang at %s answers again: ready", self._url)
            elif not healthy and self._ready:
                log.warning("SGLang at %s fails its health check: not ready", self._url)
            self._ready = healthy

    async def _healthy(self) -> bool:
        assert self._client is not None
        try:
            response = await self._client.get("/health_generate", timeout=CONTROL_TIMEOUT_S)
        except httpx.HTTPError:
            return False
        return response.status_code == httpx.codes.OK

    async def _wait_for_remote(self) -> dict[str, Any]:
        """The remote's server info, once it answers and passes its health check."""
        started = last_log = time.monotonic()
        while True:
            info = await self._server_info()
            if info is not None and await self._healthy():
                return info
            if time.monotonic() - last_log >= START_LOG_INTERVAL_S:
                last_log = time.monotonic()
                log.info("waiting for SGLang at %s (%.0f s so far)", self._url, last_log - started)
            await asyncio.sleep(UNHEALTHY_INTERVAL_S)

    async def _server_info(self) -> dict[str, Any] | None:
        """SGLang's `/server_info` (a router answers the older `/get_server_info`); {} when the
        remote answers neither but is up."""
        assert self._client is not None
        for path in ("/server_info", "/get_server_info"):
            try:
                response = await self._client.get(path, timeout=CONTROL_TIMEOUT_S)
            except httpx.HTTPError:
                return None
            if response.status_code == httpx.codes.OK:
                info = response.json()
                return info if isinstance(info, dict) else {}
        return {}

    def _limits_from(self, info: dict[str, Any]) -> EngineLimits:
        """From the remote's server info; behind a router that does not pass it on, from the
        model's own window (SGLang admits prompts up to its context less 6 tokens)."""
        max_input = info.get("max_req_input_len")
        context = (
            info.get("context_length")
            or self._settings.context_length
            or _config_context_length(self._source.path)
        )
        if isinstance(max_input, int):
            return limits(int(context or max_input + 6), max_input)
        if context is None:
            raise ModelSetupError(
                f"SGLang at {self._url} gives no limits and {self._source.path} has no "
                "config.json here: give --context-length"
            )
        log.info("SGLang at %s gives no limits: a context of %d assumed", self._url, context)
        return limits(int(context), int(context) - 6)

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _chunks(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of SGLang's event stream (`data: {...}` lines, then `data: [DONE]`)."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        chunk = json.loads(data)
        if isinstance(chunk, dict):
            yield chunk


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


def _config_context_length(model_path: str) -> int | None:
    window = (folder_config(model_path) or {}).get("max_position_embeddings")
    return window if isinstance(window, int) else None

"""What stands behind `--engine-url`: one SGLang server, or `sglang-router` in front of several (a
router answers `GET /workers`, which no SGLang server does). A router forwards generation but
answers for itself, not for a worker, what this server needs to know: the limits and modes of
the runtime (`/server_info`), aborts (`/abort_request`), health (`/health_generate`) and load
(`/v1/loads`). Those are asked of each worker directly, where this server reaches the workers;
where it does not, readiness is the router's view of its workers, and load is not known."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from server.engines.base import EngineLoad

log = logging.getLogger(__name__)

CONTROL_TIMEOUT_S = 30.0  # SGLang's /health_generate waits up to 20 s for a busy scheduler
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Worker:
    url: str
    healthy: bool = True  # as the router holds it (its own health checks and circuit breaker)


class Topology:
    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self._client = client
        self.url = url
        self.is_router = False
        self.workers: tuple[Worker, ...] = ()
        self.reachable = True  # the workers answer this server (a plain server: itself)

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(worker.url for worker in self.workers)

    def describe(self) -> str:
        if not self.is_router:
            return f"SGLang at {self.url}"
        urls = ", ".join(self.urls) or "none yet"
        reach = "each asked directly" if self.reachable else "not reachable from here"
        return f"sglang-router at {self.url} (workers: {urls}; {reach})"

    async def refresh(self) -> bool:
        """Whether the URL answers; behind a router, its workers are listed again."""
        try:
            response = await self._get(f"{self.url}/workers")
        except httpx.HTTPError:
            return False
        if response.status_code in (httpx.codes.UNAUTHORIZED, httpx.codes.FORBIDDEN):
            log.error("%s refuses this server's key: check --engine-api-key", self.url)
            return False
        listed = _workers(response)
        if listed is None:  # not a router: the URL is the one SGLang server
            self.is_router, self.workers = False, (Worker(self.url),)
            return response.status_code < httpx.codes.INTERNAL_SERVER_ERROR
        if self.is_router and tuple(w.url for w in listed) != self.urls:
            log.info("sglang-router at %s now lists %s", self.url, [w.url for w in listed])
        self.is_router, self.workers = True, listed
        return True

    async def server_infos(self) -> dict[str, dict[str, Any]]:
        """Each worker's `/server_info` and `/v1/models`, for those that answer; whether any
        does decides whether the workers are reachable from here."""
        found = await self._each(self._server_info)
        infos = {url: info for url, info in found.items() if info is not None}
        self.reachable = bool(infos) or not self.is_router
        return infos

    async def tokenize(self, url: str, body: dict[str, Any]) -> list[int] | None:
        """A worker's own rendering and tokenization (`/v1/tokenize`); None where it has none."""
        try:
            response = await self._client.post(
                f"{url}/v1/tokenize", json=body, timeout=CONTROL_TIMEOUT_S
            )
            tokens = response.json().get("tokens") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return tokens if isinstance(tokens, list) else None

    async def healthy(self) -> bool:
        """At least one worker can generate: its `/health_generate` passes (behind a router
        whose workers this server does not reach: the router holds one healthy)."""
        if not await self.refresh():
            return False
        if self.is_router and not self.reachable:
            return any(worker.healthy for worker in self.workers)
        passed = await self._each(self._generates)
        return any(passed.values())

    async def load(self) -> EngineLoad | None:
        """The workers' live load reports added up; None where they cannot be asked."""
        if not self.reachable:
            return None
        loads = [load for load in (await self._each(self._load)).values() if load is not None]
        if not loads:
            return None
        return EngineLoad(sum(x.running for x in loads), sum(x.waiting for x in loads))

    async def abort(self, request_id: str) -> None:
        """Tells the worker running the request (each worker: a router does not pass aborts
        on, and SGLang ignores an id it does not hold) to stop it now."""
        if not self.reachable:
            return  # closing the stream is the abort: the router drops its upstream request

        async def abort(url: str) -> None:
            await self._client.post(
                f"{url}/abort_request", json={"rid": request_id}, timeout=CONTROL_TIMEOUT_S
            )

        await self._each(abort)

    async def _server_info(self, url: str) -> dict[str, Any] | None:
        try:
            response = await self._get(f"{url}/server_info")
            if response.status_code == httpx.codes.NOT_FOUND:  # SGLang before 0.5
                response = await self._get(f"{url}/get_server_info")
            models = await self._get(f"{url}/v1/models")
            info, listed = response.json(), models.json()
        except (httpx.HTTPError, ValueError):
            return None
        if response.status_code != 200 or not isinstance(info, dict):
            return None
        if "router_manager" in info:  # a router's own answer, not a worker's
            return None
        data = listed.get("data") if isinstance(listed, dict) else None
        if data and isinstance(data[0], dict):
            info = {**info, "max_model_len": data[0].get("max_model_len")}
        return info

    async def _generates(self, url: str) -> bool:
        response = await self._get(f"{url}/health_generate")
        return response.status_code == httpx.codes.OK

    async def _load(self, url: str) -> EngineLoad | None:
        response = await self._get(f"{url}/v1/loads", params={"include": "core"})
        try:
            loads = response.json()["loads"]
            return EngineLoad(
                sum(int(load["num_running_reqs"]) for load in loads),
                sum(int(load["num_waiting_reqs"]) for load in loads),
            )
        except (ValueError, KeyError, TypeError):
            return None

    async def _each(self, call: Callable[[str], Awaitable[T]]) -> dict[str, T | None]:
        """`call` on every worker at once; a worker that fails to answer gives None."""

        async def guarded(url: str) -> T | None:
            try:
                return await call(url)
            except httpx.HTTPError as exc:
                log.debug("%s: %s", url, exc)
                return None

        urls = self.urls
        results = await asyncio.gather(*(guarded(url) for url in urls))
        return dict(zip(urls, results, strict=True))

    async def _get(self, url: str, **kwargs: Any) -> httpx.Response:
        return await self._client.get(url, timeout=CONTROL_TIMEOUT_S, **kwargs)


def _workers(response: httpx.Response) -> tuple[Worker, ...] | None:
    """The workers a router lists (`GET /workers`); None from anything that is not a router."""
    if response.status_code != httpx.codes.OK:
        return None
    try:
        listed = response.json()["workers"]
        return tuple(Worker(str(w["url"]), bool(w.get("is_healthy", True))) for w in listed)
    except (ValueError, KeyError, TypeError):
        return None

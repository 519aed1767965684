"""The node's one connection pool to the B3IQ gateway: HTTP/2 where the gateway speaks it,
bounded in connections, in time and in the bytes an answer may bring, with the node's own
credential. What goes wrong upstream becomes the contract's errors here: unreachable, slow, a
5xx or a stream cut short is 503 infer_backend_unavailable (with Retry-After), the upstream's
429 is 503 capacity_unavailable with its wait, its other 4xx keep their message."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import orjson

from server.errors import (
    BackendUnavailable,
    CapacityUnavailable,
    InferError,
    InvalidRequest,
    ModelNotAvailable,
    PayloadTooLarge,
)

log = logging.getLogger(__name__)

RETRY_AFTER = 5  # seconds, when the gateway names no wait
MAX_EVENT_BYTES = 1024 * 1024  # one streamed event
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # one answer, all of its events
MAX_ERROR_BYTES = 64 * 1024  # an error body read for its message


class GatewayClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float,
        connect_timeout: float,
        max_connections: int = 100,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            http2=True,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout, pool=connect_timeout),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            follow_redirects=False,  # operator configuration points at the gateway itself
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def chunks(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """The upstream's streamed chunks, parsed, as they arrive. Closing the iterator closes
        the upstream request at once."""
        try:
            async with self._http.stream("POST", self.url, json=body) as response:
                if response.status_code != 200:
                    raise await _refusal(response)
                received = 0
                async for line in response.aiter_lines():
                    received += len(line)
                    if len(line) > MAX_EVENT_BYTES or received > MAX_ANSWER_BYTES:
                        raise _unavailable("the gateway's answer is larger than the node takes")
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    yield _chunk(data)
        except httpx.TimeoutException:
            raise _unavailable("the gateway did not answer in time") from None
        except httpx.TransportError as error:
            log.warning("gateway %s: %s", self.url, error.__class__.__name__)
            raise _unavailable("the gateway cannot be reached") from None


def _unavailable(reason: str) -> BackendUnavailable:
    return BackendUnavailable(f"{reason}; retry in {RETRY_AFTER} seconds", retry_after=RETRY_AFTER)


def _chunk(data: str) -> dict[str, Any]:
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise _unavailable("the gateway sent an event that is not JSON") from None
    if not isinstance(chunk, dict):
        raise _unavailable("the gateway sent an event that is not a JSON object")
    if isinstance(chunk.get("error"), dict):  # a failure after the stream began
        message = _message(chunk) or "the gateway failed mid-answer"
        raise _unavailable(f"the gateway failed: {message}")
    return chunk


async def _refusal(response: httpx.Response) -> InferError:
    """The upstream's refusal as the node's error, its message kept."""
    raw = b""
    async for piece in response.aiter_bytes():
        raw += piece
        if len(raw) > MAX_ERROR_BYTES:
            break
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    message = (_message(body) if isinstance(body, dict) else None) or f"HTTP {response.status_code}"
    status = response.status_code
    if status == 429:
        wait = _retry_after(response)
        return CapacityUnavailable(
            f"the gateway is at capacity: {message}; retry in {wait} seconds", retry_after=wait
        )
    if status >= 500 or status in (401, 403, 407, 408):  # the node's credential or the hop
        return _unavailable(f"the gateway answered {status}: {message}")
    error = body.get("error") if isinstance(body, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    param = param if isinstance(param, str) else None
    if status == 404:
        return ModelNotAvailable(f"the gateway: {message}", param=param or "model")
    if status == 413:
        return PayloadTooLarge(f"the gateway: {message}")
    return InvalidRequest(f"the gateway: {message}", param=param)


def _message(body: dict[str, Any]) -> str | None:
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return None


def _retry_after(response: httpx.Response) -> int:
    try:
        return max(1, min(60, int(float(response.headers.get("retry-after", RETRY_AFTER)))))
    except ValueError:
        return RETRY_AFTER

"""The Quart application: routes, the per-request id and timing, and the one place errors become
responses (the Anthropic shape on the Messages routes, the OpenAI shape everywhere else and for
everything raised before the infer layer)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from quart import Quart, Response, g, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge, RequestTimeout

from server.config import Settings
from server.errors import (
    InferError,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    PayloadTooLarge,
    RouteNotFound,
    public,
)
from server.protocols.anthropic.encode import error_body as anthropic_error
from server.protocols.openai.encode import error_body as openai_error
from server.requestlog import RequestRecord
from server.routes import (
    chat,
    health,
    messages,
    metrics,
    models,
    openapi,
    requests,
    responses,
)
from server.routes.infer import json_response, route_label
from server.state import EXTENSION, ServerState, server_state
from server.timing import Timing

log = logging.getLogger(__name__)


def create_app(settings: Settings, state: ServerState | None = None) -> Quart:
    app = Quart("b3os-infer")
    app.config.update(
        MAX_CONTENT_LENGTH=settings.max_request_bytes,
        BODY_TIMEOUT=settings.body_timeout,
        # Streams set their own timeout to none; a JSON answer may take as long as generation.
        RESPONSE_TIMEOUT=None,
        JSON_SORT_KEYS=False,
    )
    app.extensions[EXTENSION] = state or ServerState(settings)
    for module in (health, messages, chat, responses, models, requests, openapi, metrics):
        app.register_blueprint(module.blueprint)
    app.before_request(_begin)
    app.after_request(_headers)
    app.register_error_handler(InferError, _render)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
    _lifecycle(app)
    return app


def _lifecycle(app: Quart) -> None:
    @app.while_serving
    async def run_engine() -> Any:
        state: ServerState = app.extensions[EXTENSION]
        # The engine starts in the background so the listener binds at once: /healthz answers and
        # infer routes say 503 starting (with Retry-After) until it is ready.
        starting = asyncio.create_task(state.start(), name="engine-start")
        yield
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await state.close()


def _begin() -> None:
    g.timing = Timing()
    g.request_id = server_state().ids.new()
    g.protocol = "openai"  # the Messages blueprint sets "anthropic"
    g.streaming = False


def _headers(response: Response) -> Response:
    request_id = getattr(g, "request_id", None)
    if request_id is not None:
        response.headers["x-request-id"] = request_id
        response.headers["request-id"] = request_id
    response.headers.update(getattr(g, "rate_limit_headers", {}))
    timing: Timing | None = getattr(g, "timing", None)
    if timing is not None and not getattr(g, "streaming", False):
        # `total` runs from reading the request head to writing the response head.
        timing.mark("total")
        response.headers["Server-Timing"] = timing.header()
        record: RequestRecord | None = getattr(g, "record", None)
        if record is not None:
            record.duration_ms = timing.since_start()  # the body is whole: it goes out now
            server_state().requests.update(record)
        server_state().metrics.answered(
            route_label(), response.status_code, getattr(g, "error_code", None)
        )
    return response


async def _render(error: InferError) -> Response:
    request_id = getattr(g, "request_id", "")
    error = public(error, request_id)
    g.error_code = error.code
    if getattr(g, "protocol", "openai") == "anthropic" and not error.before_infer:
        body = anthropic_error(error, request_id)
    else:
        body = openai_error(error)
    response = json_response(body, error.status)
    response.headers.update(error.headers())
    return response


async def _http_error(error: HTTPException) -> Response:
    """Errors Quart raises itself (routing, body size) in our shapes."""
    if isinstance(error, RequestEntityTooLarge):
        return await _render(_too_large())
    if error.code == 404:
        return await _render(RouteNotFound(f"no route {request.method} {request.path}"))
    if error.code == 405:
        response = await _render(
            MethodNotAllowed(f"{request.method} is not allowed on {request.path}")
        )
        allowed = getattr(error, "valid_methods", None)
        if allowed:
            response.headers["Allow"] = ", ".join(sorted(allowed))
        return response
    if isinstance(error, RequestTimeout):  # the body is slower than --body-timeout allows
        limit = server_state().settings.body_timeout
        return await _render(
            InvalidRequest(f"the request body did not arrive within {limit:g} seconds")
        )
    if error.code is not None and 400 <= error.code < 500:
        return await _render(InvalidRequest(error.description or "bad request"))
    return await _unexpected(error)


def _too_large() -> PayloadTooLarge:
    # Quart refuses from Content-Length before reading, and stops reading a chunked body once
    # past the limit (MAX_CONTENT_LENGTH).
    state = server_state()
    limit = state.settings.max_request_bytes
    model = state.source.served_name if state.source else "this node"
    size = request.content_length
    said = f"Request body is {size} bytes" if size else f"Request body exceeds {limit} bytes"
    return PayloadTooLarge(f"{said}; {model} accepts at most {limit}")


async def _unexpected(error: Exception) -> Response:
    log.error("request %s failed", getattr(g, "request_id", "?"), exc_info=error)
    return await _render(InternalError("internal"))

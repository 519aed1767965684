"""The request flow every protocol shares: read the JSON body, check the model, prepare, admit
against the organization's limits, then answer as one JSON body or as a stream whose head waits
for the first generated token."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import replace
from typing import Any, Literal, Protocol

import orjson
from quart import Response, current_app, g, request

from server.auth.guard import principal
from server.auth.principal import Principal
from server.canonical import Answer, Event, GenerateRequest, fold
from server.errors import (
    BackendUnavailable,
    InferError,
    InternalError,
    InvalidRequest,
    ModelNotAvailable,
    QuotaExceeded,
    UnsupportedMediaType,
    public,
)
from server.generation import Generation, Prepared, Service
from server.node.admission import Ticket
from server.node.tracker import RequestTracker
from server.protocols.context import ResponseContext
from server.requestlog import RequestRecord
from server.state import server_state
from server.timing import Timing

log = logging.getLogger(__name__)

JSON = "application/json"
# How a request names its model: Messages has no route; chat has route local (default) or gateway.
Route = Literal["messages", "local", "gateway"]
EVENT_STREAM = "text/event-stream"
DEFAULT_ANSWER_ESTIMATE = 512  # tokens charged at admission for an answer with no max_tokens


class StreamEncoder(Protocol):
    def start(self) -> bytes: ...

    def encode(self, event: Event) -> bytes: ...

    def error(self, error: InferError) -> bytes: ...


async def read_json() -> Any:
    if request.mimetype != JSON:
        raise UnsupportedMediaType("expected Content-Type: application/json")
    data = await request.get_data(cache=False)  # over max_request_bytes: 413, see server.app
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InvalidRequest("the request body is not valid JSON") from None


def route_label() -> str:
    """The route a request matched, as metrics label it (its URL rule, not its path)."""
    rule = request.url_rule
    return "unmatched" if rule is None else rule.rule


def json_response(body: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, content_type=JSON)


def served(generation: Generation, model: str, route: Route = "messages") -> Service:
    """What answers the model asked for: this node's generation when it serves it; for a chat
    request with `route: gateway`, the B3IQ gateway where the operator set it up (and allows the
    model)."""
    if model == generation.card.id:
        return generation
    if route == "gateway":
        gateway = server_state().gateway
        if gateway is None:
            raise BackendUnavailable(
                f"{model} is not served on this node, and the B3IQ gateway route is not set up "
                "here; GET /v1/infer/models lists the models that are"
            )
        if not gateway.serves(model):
            raise ModelNotAvailable(
                f"{model} is not served on this node nor through its gateway; GET "
                "/v1/infer/models lists the models that are",
                param="model",
            )
        return gateway
    if route == "local":
        hint = 'set "route":"gateway" to use the B3IQ gateway'
    else:
        hint = "GET /v1/infer/models lists the models that are"
    raise ModelNotAvailable(f"{model} is not served on this node; {hint}", param="model")


async def answer(
    request_: GenerateRequest,
    generation: Service,
    route: str,
    body: Callable[[Answer, ResponseContext], dict[str, Any]],
    stream: Callable[[ResponseContext], StreamEncoder],
) -> Response:
    state = server_state()
    who = principal()
    record = state.requests.add(
        RequestRecord(
            g.request_id,
            route,
            request_.model,
            g.timing,
            who.org,
            stream=request_.stream,
            served_by=generation.route,
        )
    )
    g.record = record
    try:
        prepared = generation.prepare(request_, g.request_id, g.timing)
        record.prompt_tokens = prepared.prompt.num_tokens
        ticket = await _admit(who, prepared)
    except InferError as error:
        record.failed(error.code)
        raise
    try:
        if generation.fetches_images:
            prepared = await _with_images(prepared, who, g.timing)
    except BaseException as error:
        ticket.release()
        record.failed(error.code if isinstance(error, InferError) else InternalError.code)
        raise
    g.rate_limit_headers = ticket.headers
    max_tokens = prepared.engine_request.sampling.max_tokens
    tracker = RequestTracker(
        record, who, ticket, state.meter, state.metrics, state.requests, max_tokens
    )
    context = ResponseContext(
        request_id=g.request_id,
        model=request_.model,  # the model served, as the request named it
        node=state.settings.node_name,
        prompt_tokens=prepared.prompt.num_tokens,
        created=int(time.time()),
        timing=g.timing,
        logprobs=request_.sampling.logprobs,
        route=generation.route,
    )
    # Made last and iterated at once on both paths: the events end the tracker however they end.
    events = generation.events(prepared, record, tracker)
    if not request_.stream:
        return json_response(body(await fold(events), context))
    return await _stream(events, stream, context, record)


async def _with_images(prepared: Prepared, who: Principal, timing: Timing) -> Prepared:
    """The request's images fetched (through the egress guard) and decoded, for the engine."""
    images = prepared.request.images()
    if not images:
        return prepared
    state = server_state()
    model = prepared.request.model
    started = time.perf_counter()

    def charge(size: int) -> None:
        state.admission.charge_image_bytes(who.org, model, size)

    decoded = await state.images.load(images, charge)
    timing.record("images", started)
    return prepared.with_images(decoded)


async def _admit(who: Principal, prepared: Prepared) -> Ticket:
    """Charges the organization's limits with the prompt and the answer's token budget as
    clamped to the window (512 at most when a chat request sets none), after the store's room
    and the key's spend cap."""
    state = server_state()
    state.check_store_room()
    if who.key_id is not None and who.spend_cap_tokens is not None:
        spent = await state.meter.spent(who.key_id)
        if spent >= who.spend_cap_tokens:
            raise QuotaExceeded(
                f"API key {who.key_id} has used its spend cap of {who.spend_cap_tokens} tokens "
                f"({spent} metered)"
            )
    budget = prepared.engine_request.sampling.max_tokens
    assert budget is not None  # prepare() sizes every answer
    if prepared.request.sampling.max_tokens is None:
        budget = min(budget, DEFAULT_ANSWER_ESTIMATE)
    model = prepared.request.model
    return state.admission.admit(who.org, model, prepared.estimated_prompt_tokens, budget)


async def _stream(
    events: AsyncGenerator[Event, None],
    stream: Callable[[ResponseContext], StreamEncoder],
    context: ResponseContext,
    record: RequestRecord,
) -> Response:
    # The body below runs outside the request context: what it needs, taken now.
    request_id: str = g.request_id
    metrics, requests = server_state().metrics, server_state().requests
    route = route_label()
    # The head waits for the first generated token: a failure before it is a plain HTTP error,
    # and Server-Timing can carry ttft.
    try:
        first = await anext(events)
    except BaseException:
        await events.aclose()
        raise
    # Made at the first token, when the prompt's cached share is known.
    encoder = stream(replace(context, cached_tokens=record.cached_tokens))

    stall_s = server_state().settings.stream_stall_timeout
    # From here the events are the body's to close, but a client can leave before the body
    # begins (its task cancelled while the head waits to be written, behind a full socket): an
    # async generator that never began runs no `finally`, so the handler's end closes them then.
    began = False
    app = current_app._get_current_object()  # type: ignore[attr-defined]

    async def abandon() -> None:
        record.duration_ms = record.timing.since_start()
        await events.aclose()  # canceled, its engine request aborted

    def handler_ended(_: asyncio.Task[Any]) -> None:
        if not began:
            app.add_background_task(abandon)

    handler = asyncio.current_task()
    assert handler is not None
    handler.add_done_callback(handler_ended)

    async def body() -> AsyncIterator[bytes]:
        nonlocal began
        began = True
        # A stream that cannot be written for stall_s (its client takes nothing, or next to
        # nothing): the task sending it is cancelled, and with it the engine request, as for a
        # client gone. Counted only while a chunk is being sent, never while the engine works:
        # one timer per stream, and per chunk only the time it was handed over.
        sending = asyncio.current_task()
        assert sending is not None
        loop = asyncio.get_running_loop()
        since: float | None = None  # when the chunk being sent was handed over; None: none is
        ended = False

        def watch() -> None:
            if ended:
                return
            now = loop.time()
            if since is not None and now - since >= stall_s:
                log.info("%s: the stream could not be written for %g s; cut", request_id, stall_s)
                sending.cancel()  # a no-op once the response, and its task, ended
                return
            # Looked at again when this chunk's time is up, or soon (a quarter of the bound, so a
            # stall is cut within 1.25 times it) if none is being sent.
            loop.call_at(now + stall_s / 4 if since is None else since + stall_s, watch)

        if stall_s > 0:
            loop.call_later(stall_s, watch)
        try:
            since = loop.time()
            yield encoder.start() + encoder.encode(first)
            since = None
            async for event in events:
                since = loop.time()
                yield encoder.encode(event)
                since = None
        except InferError as error:
            since = loop.time()
            yield encoder.error(public(error, request_id))
        except Exception:
            log.exception("stream of %s failed", request_id)
            since = loop.time()
            yield encoder.error(InternalError.for_request(request_id))
        finally:
            since = loop.time()  # what is left is being sent: bounded too
            await events.aclose()  # a client gone mid-stream aborts the engine request
            record.duration_ms = record.timing.since_start()
            requests.update(record)
            metrics.answered(route, 200, record.error_code)
            ended = True  # the watcher stops

    g.streaming = True
    response = Response(
        body(),
        content_type=EVENT_STREAM,
        headers={"Cache-Control": "no-cache", "Server-Timing": g.timing.header()},
    )
    response.timeout = None  # Quart would cut a response at 60 s
    return response

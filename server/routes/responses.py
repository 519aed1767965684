"""The OpenAI Responses routes: `POST /v1/infer/responses`, and the responses it keeps (`store`,
OpenAI's default): `GET` and `DELETE /v1/infer/responses/{id}`, `GET .../{id}/input_items`, and
`previous_response_id`, which continues one. `POST .../input_tokens` counts a request's prompt.
A kept response belongs to its organization: any other is told there is no such response."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from quart import Blueprint, Response, g, request

from server.auth.guard import principal, requires
from server.canonical import Answer
from server.errors import InvalidRequest, PreviousResponseNotFound, RouteNotFound
from server.protocols.context import ResponseContext
from server.protocols.responses import encode
from server.protocols.responses.decode import ResponsesEcho, decode_responses
from server.protocols.responses.items import as_items, with_ids
from server.routes.infer import answer, json_response, read_json, served
from server.state import server_state
from server.store.base import StoredResponse
from server.store.responses import ResponseStore

blueprint = Blueprint("responses", __name__)
MAX_LISTED = 100


@blueprint.post("/v1/infer/responses")
@requires("infer:run")
async def create_response() -> Response:
    state = server_state()
    generation = state.ready()  # 503 until then, before the body is judged
    body = await read_json()
    context = await _context(body)
    request, echo = decode_responses(_continued(body, context), state.responses_options)
    service = served(generation, request.model)
    echo = echo.sampled_as(generation.card.sampling_defaults)
    keep = None
    if echo.store:  # the stream's end runs outside the request: what it needs, taken now
        items = _input_items(body, context, g.request_id)
        keep = partial(_keep, state.responses, principal().org, items)
    stream = partial(encode.ResponseStream, echo=echo, ended=keep)
    return await answer(request, service, "responses", partial(_body, echo, keep), stream)


@blueprint.post("/v1/infer/responses/input_tokens")
@requires("infer:run")
async def count_input_tokens() -> Response:
    """The prompt a create with this body would have, counted (`usage.input_tokens`)."""
    state = server_state()
    generation = state.ready()
    body = await read_json()
    context = await _context(body)
    request, _ = decode_responses(_continued(body, context), state.responses_options)
    served(generation, request.model)
    count = generation.count_tokens(request)
    return json_response({"object": "response.input_tokens", "input_tokens": count})


@blueprint.get("/v1/infer/responses/<response_id>")
@requires("infer:read")
async def get_response(response_id: str) -> Response:
    return json_response((await _stored(response_id)).response)


@blueprint.delete("/v1/infer/responses/<response_id>")
@requires("infer:run")
async def delete_response(response_id: str) -> Response:
    if not await server_state().responses.delete(response_id, principal().org):
        raise _not_found(response_id)
    return json_response({"id": response_id, "object": "response", "deleted": True})


@blueprint.get("/v1/infer/responses/<response_id>/input_items")
@requires("infer:read")
async def list_input_items(response_id: str) -> Response:
    """The conversation the response answered, as items (the turns it continued included):
    newest first unless `order=asc`, `limit` of them after the item `after`."""
    items = (await _stored(response_id)).input_items
    order = request.args.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("order must be asc or desc", param="order")
    limit = _limit(request.args.get("limit", "20"))
    listed = items if order == "asc" else items[::-1]
    after = request.args.get("after")
    if after is not None:
        ids = [item.get("id") for item in listed]
        if after not in ids:
            raise InvalidRequest(f"no input item {after} in {response_id}", param="after")
        listed = listed[ids.index(after) + 1 :]
    page = listed[:limit]
    return json_response(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(listed) > limit,
        }
    )


def _limit(text: str) -> int:
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LISTED:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_LISTED}", param="limit")
    return limit


def _not_found(id_: str) -> RouteNotFound:
    return RouteNotFound(f"Response with id '{id_}' not found.")


async def _stored(id_: str) -> StoredResponse:
    stored = await server_state().responses.get(id_, principal().org)
    if stored is None:
        raise _not_found(id_)
    return stored


async def _context(body: Any) -> StoredResponse | None:
    """The kept response a request continues (`previous_response_id`), if it names one."""
    previous = body.get("previous_response_id") if isinstance(body, dict) else None
    if not isinstance(previous, str) or not previous:
        return None  # absent or null; another type is the decoder's to refuse
    stored = await server_state().responses.get(previous, principal().org)
    if stored is None:
        raise PreviousResponseNotFound(
            f"Previous response with id '{previous}' not found.", param="previous_response_id"
        )
    return stored


def _before(context: StoredResponse | None) -> list[Any]:
    """What the model saw and said before this request: the kept response's conversation, then
    its output (instructions are not carried over: each request gives its own)."""
    return [] if context is None else [*context.input_items, *context.response["output"]]


def _continued(body: Any, context: StoredResponse | None) -> Any:
    """The body with the continued conversation before its own input: the prompt is the one
    sending the whole conversation would have."""
    items = as_items(body.get("input")) if isinstance(body, dict) else None
    if context is None or items is None:
        return body
    return {**body, "input": [*_before(context), *items]}


def _input_items(body: Any, context: StoredResponse | None, request_id: str) -> list[Any]:
    return [*_before(context), *with_ids(as_items(body["input"]) or [], request_id)]


def _keep(store: ResponseStore, org: str, input_items: list[Any], response: dict[str, Any]) -> None:
    """Keeps an answered response, with what it answered, for its organization."""
    store.put(StoredResponse(response["id"], org, time.time(), input_items, response))


def _body(
    echo: ResponsesEcho,
    keep: Callable[[dict[str, Any]], None] | None,
    answer_: Answer,
    context: ResponseContext,
) -> dict[str, Any]:
    body = encode.response_body(answer_, context, echo)
    if keep is not None:
        keep(body)
    return body

"""The OpenAI Responses route: `POST /v1/infer/responses`, stateless (the request carries the
whole conversation)."""

from __future__ import annotations

from functools import partial

from quart import Blueprint, Response

from server.auth.guard import requires
from server.protocols.responses import encode
from server.protocols.responses.decode import decode_responses
from server.routes.infer import answer, read_json, served
from server.state import server_state

blueprint = Blueprint("responses", __name__)


@blueprint.post("/v1/infer/responses")
@requires("infer:run")
async def create_response() -> Response:
    state = server_state()
    generation = state.ready()  # 503 until then, before the body is judged
    request, echo = decode_responses(await read_json(), state.responses_options)
    service = served(generation, request.model)
    echo = echo.sampled_as(generation.card.sampling_defaults)
    body = partial(encode.response_body, echo=echo)
    stream = partial(encode.ResponseStream, echo=echo)
    return await answer(request, service, "responses", body, stream)

"""The Anthropic Messages routes: `POST /v1/infer/v1/messages` and `.../count_tokens`."""

from __future__ import annotations

from quart import Blueprint, Response, g

from server.auth.guard import requires
from server.protocols.anthropic import encode
from server.protocols.anthropic.decode import decode_count_tokens, decode_messages
from server.routes.infer import answer, json_response, read_json, served
from server.state import server_state

blueprint = Blueprint("messages", __name__)


@blueprint.before_request
def _anthropic_errors() -> None:
    g.protocol = "anthropic"


@blueprint.post("/v1/infer/v1/messages")
@requires("infer:run")
async def create_message() -> Response:
    state = server_state()
    generation = state.ready()  # 503 until then: what a request means depends on the model
    request = decode_messages(await read_json(), state.decode_options)
    service = served(generation, request.model)
    return await answer(request, service, "messages", encode.message_body, encode.MessageStream)


@blueprint.post("/v1/infer/v1/messages/count_tokens")
@requires("infer:run")
async def count_tokens() -> Response:
    state = server_state()
    generation = state.ready()
    request = decode_count_tokens(await read_json(), state.decode_options)
    served(generation, request.model)  # the model this node serves (Messages has no gateway)
    return json_response({"input_tokens": generation.count_tokens(request)})

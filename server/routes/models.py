"""`GET /v1/infer/models`: the models this node serves, with their limits and capabilities."""

from __future__ import annotations

from quart import Blueprint, Response

from server.auth.guard import requires
from server.routes.infer import json_response
from server.state import server_state

blueprint = Blueprint("models", __name__)


@blueprint.get("/v1/infer/models")
@requires("infer:read")
async def list_models() -> Response:
    generation = server_state().ready()
    return json_response({"object": "list", "data": [generation.card.to_wire()]})

"""`GET /v1/infer/models`: the model this node serves, with its limits and capabilities, and the
models its B3IQ gateway route is set up for (`route: gateway`, chat completions only)."""

from __future__ import annotations

from quart import Blueprint, Response

from server.auth.guard import requires
from server.routes.infer import json_response
from server.state import server_state

blueprint = Blueprint("models", __name__)


@blueprint.get("/v1/infer/models")
@requires("infer:read")
async def list_models() -> Response:
    state = server_state()
    generation = state.ready()
    listed = [generation.card.to_wire()]
    if state.gateway is not None:  # those the operator listed (any other may be asked too)
        listed += [
            {"id": model, "object": "model", "owned_by": "b3iq-gateway", "route": "gateway"}
            for model in sorted(state.gateway.models)
            if model != generation.card.id
        ]
    return json_response({"object": "list", "data": listed})

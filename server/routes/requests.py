"""`GET /v1/requests/{request_id}`: the request log entry of a recent request, for the
organization that made it (any other is told there is no such request)."""

from __future__ import annotations

from quart import Blueprint, Response

from server.auth.guard import principal, requires
from server.errors import RouteNotFound
from server.routes.infer import json_response
from server.state import server_state

blueprint = Blueprint("requests", __name__)


@blueprint.get("/v1/requests/<request_id>")
@requires("infer:read")
async def get_request(request_id: str) -> Response:
    entry = await server_state().requests.entry(request_id)
    if entry is None or entry.org != principal().org:
        raise RouteNotFound(f"no request {request_id} in this node's request log")
    return json_response(dict(entry.wire))

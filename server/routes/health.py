"""Liveness, readiness and the probe agents send to the base URL."""

from __future__ import annotations

from quart import Blueprint, Response

from server.routes.infer import json_response
from server.state import server_state

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
async def healthz() -> Response:
    """The process is alive (the model may still be loading)."""
    return json_response({"status": "ok"})


@blueprint.get("/readyz")
async def readyz() -> Response:
    """503 until the model runtime answers requests, and while it does not (a remote runtime
    that went away)."""
    state = server_state()
    if state.generation is None:
        return json_response({"status": "starting"}, 503)
    engine = state.generation.engine
    status = "ready" if engine.is_ready else "unavailable"
    body = {"status": status, "running_requests": engine.running_requests}
    return json_response(body, 200 if engine.is_ready else 503)


@blueprint.route("/v1/infer", methods=["HEAD"])
async def probe() -> Response:
    return Response(b"", status=200, content_type="text/plain")

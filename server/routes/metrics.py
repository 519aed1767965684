"""`GET /metrics`: the server's Prometheus metrics, with the runtime's load read at scrape time."""

from __future__ import annotations

from quart import Blueprint, Response

from server.node.metrics import CONTENT_TYPE
from server.state import server_state

blueprint = Blueprint("metrics", __name__)


@blueprint.get("/metrics")
async def metrics() -> Response:
    state = server_state()
    if state.generation is not None:
        engine = state.generation.engine
        state.metrics.engine_restarts.set(engine.restarts)
        load = await engine.load()
        state.metrics.engine_running.set(-1 if load is None else load.running + load.waiting)
        state.metrics.engine_queue.set(-1 if load is None else load.waiting)
    return Response(state.metrics.render(), content_type=CONTENT_TYPE)

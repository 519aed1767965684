"""`GET /openapi.json`: this server's OpenAPI document."""

from __future__ import annotations

import orjson
from quart import Blueprint, Response

from server.openapi import document

blueprint = Blueprint("openapi", __name__)


@blueprint.get("/openapi.json")
async def openapi() -> Response:
    return Response(orjson.dumps(document()), content_type="application/json")

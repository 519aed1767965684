"""The OpenAPI 3.1 document of this server's own routes, served at `GET /openapi.json`: Anthropic
shapes on the Messages routes, OpenAI ones elsewhere, with the request-id, timing and limit headers.
Request schemas come from the protocols' `schema.py`."""

from __future__ import annotations

from typing import Any

from server import __version__
from server.openapi.paths import path_items

__all__ = ["document"]


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "b3os-infer", "version": __version__},
        "paths": path_items(),
        "components": {
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Authorization: Bearer b3os_sk_...; an open node (no key "
                    "store) takes requests without one",
                },
                "xApiKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "x-api-key",
                    "description": "The same key in x-api-key, as Anthropic SDKs send api_key",
                },
            }
        },
    }

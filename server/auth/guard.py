"""`@requires(scope)`: a route's credential check, before anything else it does (body size and
JSON included), so 401 and 403 are in the OpenAI shape on every route."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from quart import g, request

from server.auth.principal import Principal
from server.state import server_state

P = ParamSpec("P")
R = TypeVar("R")


def requires(scope: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    def decorate(view: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(view)
        async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            headers = request.headers
            g.principal = await server_state().auth.authenticate(
                headers.get("authorization", ""), headers.get("x-api-key", ""), scope
            )
            return await view(*args, **kwargs)

        return guarded

    return decorate


def principal() -> Principal:
    """The principal `@requires` found for this request."""
    found: Principal = g.principal
    return found

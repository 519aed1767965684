"""Fuzzing the real server: schema-valid bodies, the same with one member made hostile, and raw
bytes that are barely JSON or not at all. Whatever arrives, the answer is never a 5xx and never
a hang, and refusals are in the route's shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.api.contract import MODEL
from tests.fuzz.from_schema import ANY_JSON
from tests.fuzz.strategies import chat_bodies, messages_bodies, mutated, responses_bodies

EXAMPLES = 60  # per route and property; most bodies reach the engine (max_tokens small)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)
MOSTLY_TRUE = st.integers(0, 4).map(bool)  # four times in five
ROUTES = {
    "messages": "/v1/infer/v1/messages",
    "chat": "/v1/infer/chat/completions",
    "responses": "/v1/infer/responses",
}
BODIES = {"messages": messages_bodies, "chat": chat_bodies, "responses": responses_bodies}


def servable(body: dict[str, Any], use_model: bool) -> dict[str, Any]:
    """Keep generation short, and often name the served model so bodies reach the engine."""
    if use_model:
        body["model"] = MODEL
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if type(body.get(key)) is int:
            body[key] = min(body[key], 2)
    if "input" in body and body.get("max_output_tokens") is None:
        body["max_output_tokens"] = 2  # Responses: unset runs to the end of the context
    elif body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_completion_tokens"] = 2  # chat: unset runs to the end of the context
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        # Empty and null contents are refused; fill them so more bodies reach the engine.
        if isinstance(message, dict) and message.get("content") in (None, "", []):
            message["content"] = "Hi"
    return body


def check_answer(response: httpx.Response, route: str, body: Any = None) -> None:
    if response.status_code == 503 and isinstance(body, dict) and body.get("route") == "gateway":
        # Documented: a model this node does not serve, asked of the gateway, which is not set up.
        assert response.json()["error"]["code"] == "infer_backend_unavailable"
        return
    assert response.status_code < 500, response.text
    assert response.headers["x-request-id"].startswith("req_")
    if response.status_code >= 400:
        body = response.json()
        if route == ROUTES["messages"] and response.status_code not in (413,):
            assert body["type"] == "error"
        else:
            assert set(body["error"]) == {"message", "type", "param", "code"}


def post(http: httpx.Client, route: str, content: bytes) -> httpx.Response:
    with http.stream(
        "POST", route, content=content, headers={"content-type": "application/json"}
    ) as response:
        response.read()  # a stream is read to its end: its events may not fail either
    return response


@pytest.mark.parametrize("protocol", list(ROUTES))
def test_schema_valid_bodies(http: httpx.Client, protocol: str) -> None:
    route = ROUTES[protocol]

    @FUZZ
    @given(BODIES[protocol](), MOSTLY_TRUE)
    def check(body: dict[str, Any], use_model: bool) -> None:
        body = servable(body, use_model)
        check_answer(post(http, route, orjson.dumps(body)), route, body)

    check()


@pytest.mark.parametrize("protocol", list(ROUTES))
def test_bodies_with_a_hostile_member(http: httpx.Client, protocol: str) -> None:
    route = ROUTES[protocol]

    @FUZZ
    @given(mutated(BODIES[protocol]()), MOSTLY_TRUE)
    def check(body: dict[str, Any], use_model: bool) -> None:
        body = servable(body, use_model)
        check_answer(post(http, route, orjson.dumps(body)), route, body)

    check()


RAW: dict[str, Callable[[], st.SearchStrategy[bytes]]] = {
    "random bytes": lambda: st.binary(max_size=2048),
    "random JSON": lambda: ANY_JSON.map(orjson.dumps),
    "truncated JSON": lambda: (
        messages_bodies()
        .map(orjson.dumps)
        .flatmap(lambda raw: st.integers(0, max(len(raw) - 1, 0)).map(lambda n: raw[:n]))
    ),
    "invalid UTF-8 in a string": lambda: st.binary(min_size=1, max_size=16).map(
        lambda junk: b'{"model": "' + junk + b'\xff", "max_tokens": 2, "messages": []}'
    ),
}


@pytest.mark.parametrize("kind", list(RAW))
@pytest.mark.parametrize("protocol", list(ROUTES))
def test_raw_bodies(http: httpx.Client, protocol: str, kind: str) -> None:
    route = ROUTES[protocol]

    @settings(FUZZ, max_examples=EXAMPLES // 3)
    @given(RAW[kind]())
    def check(raw: bytes) -> None:
        response = post(http, route, raw)
        check_answer(response, route)
        assert response.status_code in (200, 400, 404, 413)

    check()

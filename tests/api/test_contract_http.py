"""The contract at the HTTP level, on both infer routes: body size, media type, bodies that are
not JSON, and unknown routes and methods."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.api.contract import MODEL

LIMIT = 10 * 1024 * 1024
ROUTES = ["/v1/infer/v1/messages", "/v1/infer/chat/completions"]


def anthropic_shaped(path: str) -> bool:
    return path.startswith("/v1/infer/v1/messages")


def code_of(path: str, body: dict[str, object]) -> str:
    """The B3OS code, wherever the shape of the route puts it."""
    error = body["b3os"] if anthropic_shaped(path) else body["error"]
    assert isinstance(error, dict)
    return str(error["code"])


def oversized() -> bytes:
    message = {"role": "user", "content": "x" * (LIMIT + 1024)}
    return orjson.dumps({"model": MODEL, "max_tokens": 4, "messages": [message]})


@pytest.mark.parametrize("path", [*ROUTES, "/v1/infer/v1/messages/count_tokens"])
def test_body_over_the_limit_is_refused_from_content_length(http: httpx.Client, path: str) -> None:
    body = oversized()
    response = http.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    error = response.json()["error"]  # raised before the infer layer: the OpenAI shape everywhere
    assert (error["code"], error["type"], error["param"]) == (
        "payload_too_large",
        "invalid_request_error",
        None,
    )
    assert error["message"] == f"Request body is {len(body)} bytes; {MODEL} accepts at most {LIMIT}"


@pytest.mark.parametrize("path", ROUTES)
def test_chunked_body_over_the_limit_stops_being_read(http: httpx.Client, path: str) -> None:
    def chunks() -> Iterator[bytes]:
        body = oversized()
        for start in range(0, len(body), 1 << 20):
            yield body[start : start + (1 << 20)]

    response = http.post(path, content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert response.json()["error"]["message"].startswith(f"Request body exceeds {LIMIT} bytes")


def test_sdks_map_413(anthropic_client: anthropic.Anthropic, openai_client: openai.OpenAI) -> None:
    text = "x" * (LIMIT + 1)
    with pytest.raises(anthropic.ContentTooLargeError):
        anthropic_client.messages.create(
            model=MODEL, max_tokens=4, messages=[{"role": "user", "content": text}]
        )
    with pytest.raises(openai.APIStatusError) as raised:
        openai_client.chat.completions.create(
            model=MODEL, max_tokens=4, messages=[{"role": "user", "content": text}]
        )
    assert raised.value.status_code == 413


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_body_that_is_not_json_is_415(
    http: httpx.Client, path: str, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = http.post(path, content=b'{"model": "m"}', headers=headers)
    assert response.status_code == 415
    assert code_of(path, response.json()) == "unsupported_media_type"


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b"",
        b'{"model": "m",}',
        b'{"model": NaN}',
        b'{"model": "\xff\xfe"}',
        b"[" * 5000 + b"]" * 5000,
        b'{"max_tokens": 1' + b"0" * 40 + b"}",
    ],
    ids=[
        "truncated",
        "empty",
        "trailing comma",
        "NaN",
        "invalid UTF-8",
        "nested 5000 deep",
        "huge integer",
    ],
)
def test_malformed_json_is_400(http: httpx.Client, path: str, raw: bytes) -> None:
    response = http.post(path, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert code_of(path, response.json()) == "invalid_request"


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("raw", [b"[]", b'"text"', b"12", b"null"])
def test_a_body_that_is_not_an_object_is_400(http: httpx.Client, path: str, raw: bytes) -> None:
    response = http.post(path, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert code_of(path, response.json()) == "invalid_request"


def test_json_with_charset_is_json(http: httpx.Client) -> None:
    body = (
        b'{"model": "%s", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}'
        % MODEL.encode()
    )
    response = http.post(
        ROUTES[1], content=body, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert response.status_code == 200

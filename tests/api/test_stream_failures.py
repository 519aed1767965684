"""Failures the real model cannot be made to produce on demand, through the real app and
Hypercorn with a scripted engine: an error before the first token is a plain HTTP error, one
after it ends the stream with the protocol's error event."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.config import Settings, default_cache_dir
from server.errors import BackendUnavailable
from tests.api.scripted import ScriptedServer, end, scripted_server, text
from tests.api.sse import events
from tests.server_process import free_port

MODEL = "b3os/smollm2-135m-instruct"
HELLO = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedServer]:
    settings = Settings(
        port=free_port(), node_name="test-node", cache_dir=Path(default_cache_dir())
    )
    yield from scripted_server(settings)


@pytest.fixture
def client(scripted: ScriptedServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=scripted.origin, timeout=60) as http:
        yield http


def body(stream: bool) -> dict[str, object]:
    return {"model": MODEL, "max_tokens": 16, "stream": stream, "messages": HELLO}


def test_scripted_stream_completes(scripted: ScriptedServer, client: httpx.Client) -> None:
    scripted.play(text("Hel", 1), text("lo", 2), end(9, 3))
    with client.stream("POST", "/v1/infer/v1/messages", json=body(True)) as response:
        names = [name for name, _ in events(response)]
    assert names[-1] == "message_stop"


def test_failure_after_the_first_token_ends_a_messages_stream_with_an_error_event(
    scripted: ScriptedServer, client: httpx.Client
) -> None:
    scripted.play(text("Hel", 1), RuntimeError("engine process died"))
    with client.stream("POST", "/v1/infer/v1/messages", json=body(True)) as response:
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        received = list(events(response))
    name, error = received[-1]
    assert name == "error"
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert error["error"]["message"] == f"internal error (request {request_id})"
    assert "died" not in str(error)  # exception text never reaches the client
    assert error["b3os"]["code"] == "internal"
    assert [n for n, _ in received].index("error") == len(received) - 1  # nothing after it
    entry = client.get(f"/v1/requests/{request_id}").json()
    assert entry["status"] == "failed"


def test_failure_after_the_first_token_ends_a_chat_stream_with_an_error_event(
    scripted: ScriptedServer, client: httpx.Client
) -> None:
    scripted.play(text("Hel", 1), BackendUnavailable("restarting", retry_after=5))
    with client.stream("POST", "/v1/infer/chat/completions", json=body(True)) as response:
        assert response.status_code == 200
        received = [data for _, data in events(response)]
    # The error event ends the stream: nothing after it, not even [DONE].
    assert received[-1] == {
        "error": {
            "message": "restarting",
            "type": "server_error",
            "param": None,
            "code": "infer_backend_unavailable",
        }
    }
    assert "[DONE]" not in received


@pytest.mark.parametrize("path", ["/v1/infer/v1/messages", "/v1/infer/chat/completions"])
def test_failure_before_the_first_token_is_a_plain_http_error(
    scripted: ScriptedServer, client: httpx.Client, path: str
) -> None:
    scripted.play(BackendUnavailable("the model runtime on test-node is restarting", retry_after=5))
    response = client.post(path, json=body(True))
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.headers["content-type"] == "application/json"
    payload = response.json()
    code = payload["b3os"]["code"] if "b3os" in payload else payload["error"]["code"]
    assert code == "infer_backend_unavailable"


def test_unexpected_failure_of_a_json_answer_is_a_500_naming_the_request(
    scripted: ScriptedServer, client: httpx.Client
) -> None:
    scripted.play(text("Hel", 1), ValueError("secret internals"))
    response = client.post("/v1/infer/chat/completions", json=body(False))
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "internal"
    assert error["message"] == f"internal error (request {response.headers['x-request-id']})"


def test_failure_after_the_first_token_ends_a_responses_stream_with_error_and_failed(
    scripted: ScriptedServer, client: httpx.Client
) -> None:
    """OpenAI's pair: an `error` event, then `response.failed` with the response as it stood
    (the item still open is not in it); nothing after them."""
    scripted.play(text("Hel", 1), RuntimeError("engine process died"))
    payload = {"model": MODEL, "input": "Hi", "max_output_tokens": 16, "stream": True}
    with client.stream("POST", "/v1/infer/responses", json=payload) as response:
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        received = list(events(response))
    names = [name for name, _ in received]
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-2:] == ["error", "response.failed"]
    error, failed = received[-2][1], received[-1][1]
    assert error == {
        "type": "error",
        "sequence_number": len(received) - 2,
        "code": "internal",
        "message": f"internal error (request {request_id})",
        "param": None,
    }
    assert failed["sequence_number"] == len(received) - 1
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": "internal", "message": error["message"]}
    assert failed["response"]["output"] == [] and failed["response"]["usage"] is None
    assert client.get(f"/v1/requests/{request_id}").json()["status"] == "failed"

"""The `sglang-remote` engine against SGLang's own HTTP server (`b3os-infer sglang-server`, real
SGLang, real model): what only a remote runtime can do. A client that goes away stops the
generation at the remote; the remote crashing mid-stream ends the stream with a clear error
event, refuses new requests with 503 and `Retry-After`, turns readiness false, and everything
comes back once the remote is up again. The rest of the API suite runs against this engine too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.contract import MODEL
from tests.api.conventions import COUNTING, wait_for
from tests.api.sse import events
from tests.server_process import ServerProcess, free_port
from tests.topology import busy

pytestmark = pytest.mark.remote_only

MAX_TOKENS = 2000  # only an abort or a failure ends these answers early
REMOTE_RESTART_S = 300.0


def streaming_body(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "messages": COUNTING,
    }


def test_disconnect_aborts_the_request_at_the_remote(
    server: ServerProcess, sglang_server: ServerProcess, model: str
) -> None:
    with httpx.Client(base_url=server.origin, timeout=60) as client:
        with client.stream("POST", "/v1/infer/v1/messages", json=streaming_body(model)) as stream:
            # Read by hand, the reader kept: leaving a loop over it would close the connection.
            reader = events(stream)
            deltas = 0
            while deltas < 3:
                name, _ = next(reader)
                deltas += name == "content_block_delta"
            assert busy(sglang_server) == 1  # generating at the remote while we read
    wait_for(lambda: busy(sglang_server) == 0)


def test_the_remote_going_away_mid_stream_and_coming_back(
    server: ServerProcess, sglang_server: ServerProcess, http: httpx.Client, model: str
) -> None:
    received: list[tuple[str | None, Any]] = []
    with httpx.Client(base_url=server.origin, timeout=60) as client:
        with client.stream("POST", "/v1/infer/v1/messages", json=streaming_body(model)) as stream:
            assert stream.status_code == 200
            for name, data in events(stream):
                received.append((name, data))
                if name == "content_block_delta" and len(received) == 5:
                    sglang_server.kill()
    name, error = received[-1]
    assert name == "error"
    assert error["error"]["type"] == "overloaded_error"
    assert error["b3os"]["code"] == "infer_backend_unavailable"
    assert "content_block_delta" in [n for n, _ in received]

    # The server keeps serving: alive, not ready, and refusing in each protocol's shape.
    assert http.get("/healthz").status_code == 200
    readiness = http.get("/readyz")
    assert readiness.status_code == 503
    assert readiness.json()["status"] == "unavailable"
    hello = [{"role": "user", "content": "Hi"}]
    refused = http.post(
        "/v1/infer/v1/messages", json={"model": model, "max_tokens": 4, "messages": hello}
    )
    assert refused.status_code == 503
    assert int(refused.headers["retry-after"]) > 0
    assert refused.json()["b3os"]["code"] == "infer_backend_unavailable"
    refused = http.post(
        "/v1/infer/chat/completions", json={"model": model, "max_tokens": 4, "messages": hello}
    )
    assert refused.status_code == 503
    assert int(refused.headers["retry-after"]) > 0
    assert refused.json()["error"]["code"] == "infer_backend_unavailable"

    # The remote comes back on its address: readiness turns true and requests are served.
    sglang_server.start()
    sglang_server.wait_for("/health_generate")
    wait_for(lambda: http.get("/readyz").status_code == 200, timeout=REMOTE_RESTART_S)
    answer = http.post(
        "/v1/infer/v1/messages", json={"model": model, "max_tokens": 4, "messages": hello}
    )
    assert answer.status_code == 200
    assert answer.json()["usage"]["output_tokens"] >= 1


@pytest.fixture(scope="module")
def orphan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose remote is not there (yet): nothing listens on its engine URL."""
    url = f"http://127.0.0.1:{free_port()}"
    process = ServerProcess(
        tmp_path_factory.mktemp("orphan") / "server.log",
        "--engine",
        "sglang-remote",
        "--engine-url",
        url,
        "--compat",
        "claude-code",  # what a request may hold depends on the model: not judged before
    )
    with process.running("/healthz"):  # listening; its engine never starts
        yield process


def test_a_server_waiting_for_its_remote(orphan: ServerProcess, engine: str) -> None:
    del engine  # run with the remote variant of the suite
    with httpx.Client(base_url=orphan.origin, timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        readiness = client.get("/readyz")
        assert readiness.status_code == 503
        assert readiness.json()["status"] == "starting"
        hello = [{"role": "user", "content": "Hi"}]
        refused = client.post(
            "/v1/infer/chat/completions",
            json={"model": MODEL, "max_tokens": 4, "messages": hello},
        )
    assert refused.status_code == 503
    assert int(refused.headers["retry-after"]) > 0
    assert refused.json()["error"]["code"] == "infer_backend_unavailable"


def test_until_ready_every_infer_route_answers_503_in_its_shape(
    orphan: ServerProcess, engine: str
) -> None:
    """Even a request that only the started model's options make valid (a system message
    inside messages, taken with --compat claude-code) is not judged before the model is up."""
    del engine
    inside = [{"role": "user", "content": "Hi"}, {"role": "system", "content": "Be brief."}]
    body = {"model": MODEL, "max_tokens": 4, "messages": inside}
    with httpx.Client(base_url=orphan.origin, timeout=30) as client:
        for path in ("/v1/infer/v1/messages", "/v1/infer/v1/messages/count_tokens"):
            refused = client.post(path, json=body)
            assert refused.status_code == 503, refused.text
            assert int(refused.headers["retry-after"]) > 0
            assert refused.json()["error"]["type"] == "overloaded_error"
            assert refused.json()["b3os"]["code"] == "infer_backend_unavailable"
        refused = client.post("/v1/infer/chat/completions", json={**body, "messages": inside[:1]})
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "infer_backend_unavailable"

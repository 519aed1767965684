"""A client that goes away mid-stream stops its generation, and the server keeps serving."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.api.conventions import COUNTING, wait_for
from tests.api.sse import events

MAX_TOKENS = 2000  # far more than the client waits for: only an abort ends this answer early


def test_disconnect_mid_stream_aborts_the_generation(
    server: Any, http: httpx.Client, model: str
) -> None:
    body = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "messages": COUNTING,
    }
    with httpx.Client(base_url=server.origin, timeout=60) as client:
        with client.stream("POST", "/v1/infer/v1/messages", json=body) as response:
            request_id = response.headers["x-request-id"]
            received = 0
            for name, _ in events(response):
                received += name == "content_block_delta"
                if received == 3:
                    break
    # Leaving the block closes the connection (httpx drops a half-read HTTP/1.1 response).

    def canceled() -> dict[str, Any] | None:
        entry = http.get(f"/v1/requests/{request_id}").json()
        return entry if entry["status"] == "canceled" else None

    entry = wait_for(canceled)
    # The engine let go of it: nothing running, and the count of tokens stays where it stopped.
    wait_for(lambda: http.get("/readyz").json()["running_requests"] == 0)
    stopped_at = http.get(f"/v1/requests/{request_id}").json()["usage"]["completion_tokens"]
    assert entry["finish_reason"] is None
    assert 3 <= stopped_at < MAX_TOKENS

    follow_up = http.post(
        "/v1/infer/v1/messages",
        json={"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]},
    )
    assert follow_up.status_code == 200
    assert http.get(f"/v1/requests/{request_id}").json()["usage"]["completion_tokens"] == stopped_at


def test_concurrent_streams_all_complete(server: Any, model: str) -> None:
    def one(index: int) -> tuple[str | None, int]:
        body = {
            "model": model,
            "max_tokens": 6,
            "stream": True,
            "messages": [{"role": "user", "content": f"Say {index}."}],
        }
        with httpx.Client(base_url=server.origin, timeout=120) as client:
            with client.stream("POST", "/v1/infer/v1/messages", json=body) as response:
                received = list(events(response))
        return received[-1][0], response.status_code

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(one, range(6)))
    assert results == [("message_stop", 200)] * 6

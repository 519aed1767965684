"""A client that goes away stops its generation however it leaves (mid-body, before the first
token, mid-answer, JSON or streamed, one HTTP/2 connection with several requests), nothing stays
counted in flight, and the server keeps serving."""

from __future__ import annotations

import math
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.settings
import httpx
import orjson
import pytest

from tests.api.conventions import COUNTING, metric, wait_for
from tests.api.sse import events
from tests.server_process import ServerProcess

MAX_TOKENS = 2000  # far more than the client waits for: only an abort ends this answer early


@pytest.mark.every_engine
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


@pytest.mark.every_engine
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


def _in_flight(http: httpx.Client) -> float:
    return _metric(http, "b3os_infer_requests_in_flight")


def _metric(http: httpx.Client, name: str, **labels: str) -> float:
    return metric(http.get("/metrics").text, name, **labels)


def _settled(http: httpx.Client) -> bool:
    """Nothing in flight at the front, nothing running at the engine."""
    return _in_flight(http) == 0 and http.get("/readyz").json()["running_requests"] == 0


def _http1(origin: str, path: str, body: bytes, sent: int) -> socket.socket:
    host, port = origin.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = f"POST {path} HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body[:sent])
    return sock


def _abrupt(sock: socket.socket) -> None:
    """Closed as a killed process's socket is: at once, unread data and all (RST)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("way", "after_s"),
    [("mid-body", 0.2), ("before-first-token", 0.0), ("mid-answer", 1.0)],
)
def test_every_way_a_client_leaves_ends_its_request(
    server: ServerProcess, http: httpx.Client, model: str, way: str, after_s: float, stream: bool
) -> None:
    """Killed mid-JSON body, while its prompt is read, or mid-answer, JSON or streamed, over
    HTTP/1.1: the front's in-flight gauge and the engine both let the request go."""
    assert wait_for(lambda: _settled(http))
    long = [{"role": "user", "content": "Write a long story. " * 200}]
    messages = COUNTING if way == "mid-answer" else long
    body = orjson.dumps(
        {"model": model, "max_tokens": MAX_TOKENS, "stream": stream, "messages": messages}
    )
    sent = len(body) // 2 if way == "mid-body" else len(body)
    sock = _http1(server.origin, "/v1/infer/chat/completions", body, sent)
    if after_s:
        time.sleep(after_s)  # the state under test: the engine mid-answer, or the body cut
    _abrupt(sock)
    assert wait_for(lambda: _settled(http))
    assert http.get("/v1/infer/models").status_code == 200


def test_a_dropped_http2_connection_ends_every_stream_on_it(
    server: ServerProcess, http: httpx.Client, model: str
) -> None:
    assert wait_for(lambda: _settled(http))
    body = orjson.dumps({"model": model, "max_tokens": MAX_TOKENS, "messages": COUNTING})
    host, port = server.origin.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    for index, stream in enumerate((False, True, False)):
        framed = orjson.dumps({**orjson.loads(body), "stream": stream})
        headers = [
            (":method", "POST"), (":path", "/v1/infer/v1/messages"), (":scheme", "http"),
            (":authority", "node"), ("content-type", "application/json"),
            ("content-length", str(len(framed))),
        ]  # fmt: skip
        conn.send_headers(1 + 2 * index, headers)
        conn.send_data(1 + 2 * index, framed, end_stream=True)
    sock.sendall(conn.data_to_send())
    assert wait_for(lambda: _in_flight(http) == 3)
    _abrupt(sock)
    assert wait_for(lambda: _settled(http))


def test_a_stream_whose_head_cannot_be_written_ends_when_its_client_leaves(
    server: ServerProcess, http: httpx.Client, model: str
) -> None:
    """A client that reads nothing fills its connection with other answers (OpenAPI documents on
    the same HTTP/2 connection, more than the kernel's largest send buffer), so a stream's head
    waits to be written after its first token; then the connection is reset. Its events, which
    the body never began to send, are closed all the same: the request ends, its engine request
    aborted."""
    assert wait_for(lambda: _settled(http))
    document = len(http.get("/openapi.json").content)
    send_buffer_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    blockers = math.ceil((send_buffer_max + 2**20) / document)
    assert blockers < 100, "the session server takes 100 streams on one connection"
    ttft_before = _metric(http, "b3os_infer_time_to_first_token_seconds_count", api="messages")
    tokens_before = _metric(http, "b3os_infer_completion_tokens_total")

    host, port = server.origin.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()  # windows as large as HTTP/2 allows: only the socket holds back
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
    conn.increment_flow_control_window(2**31 - 1 - 65535)
    head = [(":scheme", "http"), (":authority", "node")]
    for index in range(blockers):
        conn.send_headers(
            1 + 2 * index, [(":method", "GET"), (":path", "/openapi.json"), *head], end_stream=True
        )
    framed = orjson.dumps(
        {"model": model, "max_tokens": MAX_TOKENS, "stream": True, "messages": COUNTING}
    )
    conn.send_headers(
        1 + 2 * blockers,
        [
            (":method", "POST"), (":path", "/v1/infer/v1/messages"), *head,
            ("content-type", "application/json"), ("content-length", str(len(framed))),
        ],
    )  # fmt: skip
    conn.send_data(1 + 2 * blockers, framed, end_stream=True)
    sock.sendall(conn.data_to_send())
    assert wait_for(lambda: _in_flight(http) == 1)
    # A request sent after it, answered: the stream's first token is out of the engine by then
    # (its prefill is scheduled first, or in the same batch), and its handler holds it.
    probe = {"model": model, "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]}
    assert http.post("/v1/infer/chat/completions", json=probe).status_code == 200
    _abrupt(sock)

    assert wait_for(lambda: _settled(http))
    assert (
        _metric(http, "b3os_infer_time_to_first_token_seconds_count", api="messages")
        == ttft_before + 1
    )  # it ended after its first token, and was counted as ended
    assert _metric(http, "b3os_infer_completion_tokens_total") - tokens_before < MAX_TOKENS

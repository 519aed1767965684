"""Bounds on slow and idle clients, on a node of their own (the replay engine: the bounds are
the HTTP side's) with short limits: a body sent a byte at a time is refused once
--body-timeout passes, an idle keep-alive connection is closed after --keep-alive-timeout, a
stream its client stops reading is cut with its generation after --stream-stall-timeout, and
100 streams multiplexed on one HTTP/2 connection all complete."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import httpx
import orjson
import pytest

from tests.api.contract import MODEL
from tests.server_process import ServerProcess

BODY_TIMEOUT_S = 2
KEEP_ALIVE_S = 1
STALL_S = 2
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("bounded") / "server.log",
        "--engine", "replay",
        "--body-timeout", str(BODY_TIMEOUT_S),
        "--keep-alive-timeout", str(KEEP_ALIVE_S),
        "--stream-stall-timeout", str(STALL_S),
    )  # fmt: skip
    with process.running():
        yield process


def connect(node: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", node.port), timeout=30)


def read_response(sock: socket.socket, received: bytes = b"") -> tuple[bytes, bytes]:
    """An HTTP/1.1 response with a Content-Length, whole: its status line and its body."""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length: (\d+)", head)
    assert length is not None, head
    while len(body) < int(length.group(1)):
        body += sock.recv(65536)
    return head.partition(b"\r\n")[0], body


def test_a_body_sent_a_byte_at_a_time_is_refused_after_the_body_timeout(
    node: ServerProcess,
) -> None:
    body = orjson.dumps(
        {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    )
    sock = connect(node)
    head = "POST /v1/infer/v1/messages HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode())
    sock.settimeout(0.25)
    started, answer = time.monotonic(), b""
    for byte in body:
        sock.sendall(bytes([byte]))
        try:
            answer = sock.recv(65536)
            break
        except TimeoutError:
            continue
    waited = time.monotonic() - started  # until the answer began
    sock.settimeout(30)
    status, rest = read_response(sock, answer)
    sock.close()
    assert status == b"HTTP/1.1 400 ", answer
    error = orjson.loads(rest)
    assert error["error"]["message"] == (
        f"the request body did not arrive within {BODY_TIMEOUT_S} seconds"
    )
    assert error["b3os"]["code"] == "invalid_request"
    assert BODY_TIMEOUT_S <= waited < BODY_TIMEOUT_S + 5


def test_an_idle_connection_is_closed_after_the_keep_alive_timeout(node: ServerProcess) -> None:
    # Each time taken before the server's timer can start (it starts on the connection's
    # accept, and once an answer is sent): the wait measured is never shorter than the timeout.
    started = time.monotonic()
    sock = connect(node)
    assert sock.recv(1) == b""  # closed by the server, having sent nothing
    assert KEEP_ALIVE_S <= time.monotonic() - started < KEEP_ALIVE_S + 5
    sock.close()
    # and after an answer too: the connection is idle again once it is sent
    sock = connect(node)
    started = time.monotonic()
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n")
    assert read_response(sock)[0] == b"HTTP/1.1 200 "
    assert sock.recv(1) == b""
    assert KEEP_ALIVE_S <= time.monotonic() - started < KEEP_ALIVE_S + 5


def test_100_streams_on_one_http2_connection_all_complete(node: ServerProcess) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "Hi"}],
    }

    async def run() -> list[tuple[str, int, bool]]:
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(
            base_url=node.origin, http2=True, http1=False, timeout=120, limits=limits
        ) as client:

            async def one() -> tuple[str, int, bool]:
                async with client.stream("POST", "/v1/infer/chat/completions", json=body) as r:
                    text = (await r.aread()).decode()
                return r.http_version, r.status_code, text.rstrip().endswith("data: [DONE]")

            return await asyncio.gather(*(one() for _ in range(100)))

    assert asyncio.run(run()) == [("HTTP/2", 200, True)] * 100


def test_a_stream_its_client_stops_reading_is_cut_with_its_generation(
    node: ServerProcess,
) -> None:
    """An HTTP/2 client that grants no flow-control window takes nothing: once the server's
    stream buffer is full its writes wait, and after --stream-stall-timeout the stream is reset
    and its generation ended (the replay engine's 256 pieces are far more than the buffer).
    A stream read whole just before is not cut, then or later."""
    with httpx.Client(base_url=node.origin, timeout=30) as http:
        whole = http.post("/v1/infer/chat/completions", json={**CHAT, "stream": True})
        assert whole.text.endswith("data: [DONE]\n\n")
    sock = connect(node)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}
    )
    conn.initiate_connection()
    body = orjson.dumps({**CHAT, "max_tokens": 256, "stream": True})
    headers = [
        (":method", "POST"), (":path", "/v1/infer/chat/completions"), (":scheme", "http"),
        (":authority", "node"), ("content-type", "application/json"),
        ("content-length", str(len(body))),
    ]  # fmt: skip
    conn.send_headers(1, headers)
    conn.send_data(1, body, end_stream=True)
    sock.sendall(conn.data_to_send())
    request_id, reset = None, None
    started = time.monotonic()
    while reset is None:
        data = sock.recv(65536)
        assert data, "the server closed the connection"
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                request_id = dict(event.headers)[b"x-request-id"].decode()
            elif isinstance(event, h2.events.StreamReset):
                reset = event.error_code
            elif isinstance(event, h2.events.StreamEnded):
                raise AssertionError("the stream was not cut")
        sock.sendall(conn.data_to_send())
    waited = time.monotonic() - started
    sock.close()
    assert request_id is not None
    assert reset == h2.errors.ErrorCodes.CANCEL
    assert STALL_S <= waited < STALL_S + 10
    with httpx.Client(base_url=node.origin, timeout=30) as http:
        entry = http.get(f"/v1/requests/{request_id}").json()
        assert entry["status"] == "canceled", entry
        assert entry["usage"]["completion_tokens"] < 256
        assert http.get("/readyz").json()["running_requests"] == 0
        assert "b3os_infer_requests_in_flight 0.0" in http.get("/metrics").text
    log = node.log_text()
    assert f"{request_id}: the stream could not be written for {STALL_S} s; cut" in log
    assert f"{whole.headers['x-request-id']}: the stream could not" not in log

"""Bounds on slow and idle clients, on a node of their own (the replay engine: the bounds are
the HTTP side's) with short limits: a body sent a byte at a time is refused once
--body-timeout passes, an idle keep-alive connection is closed after --keep-alive-timeout, and
100 streams multiplexed on one HTTP/2 connection all complete."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.api.contract import MODEL
from tests.server_process import ServerProcess

BODY_TIMEOUT_S = 2
KEEP_ALIVE_S = 1


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("bounded") / "server.log",
        "--engine", "replay",
        "--body-timeout", str(BODY_TIMEOUT_S),
        "--keep-alive-timeout", str(KEEP_ALIVE_S),
    )  # fmt: skip
    with process.running():
        yield process


def connect(node: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", node.port), timeout=30)


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
    waited = time.monotonic() - started
    sock.close()
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 400 ", answer
    error = orjson.loads(rest.partition(b"\r\n\r\n")[2])
    assert error["error"]["message"] == (
        f"the request body did not arrive within {BODY_TIMEOUT_S} seconds"
    )
    assert error["b3os"]["code"] == "invalid_request"
    assert BODY_TIMEOUT_S <= waited < BODY_TIMEOUT_S + 5


def test_an_idle_connection_is_closed_after_the_keep_alive_timeout(node: ServerProcess) -> None:
    sock = connect(node)
    started = time.monotonic()
    assert sock.recv(1) == b""  # closed by the server, having sent nothing
    assert KEEP_ALIVE_S <= time.monotonic() - started < KEEP_ALIVE_S + 5
    sock.close()
    # and after an answer too: the connection is idle again once it is sent
    sock = connect(node)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n")
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    started = time.monotonic()
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

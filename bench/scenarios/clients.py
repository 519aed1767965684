"""Slow and idle clients against the server under test (when it runs on this machine): its
memory while one client reads a long stream at 1 byte per second, while hundreds of idle
keep-alive connections are open (and how many are still open after --keep-alive-timeout), and
100 concurrent streams on one HTTP/2 connection."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import psutil

from bench import prompts
from bench.report import Row
from bench.run import Run
from bench.target import Target

NAME = "slow and idle clients"
NOTE = (
    "RSS of the server's own process (where SGLang's TokenizerManager buffers a stream's "
    "output). Slow reader: max_tokens 2000, the socket's receive buffer at 4 KiB."
)
IDLE = 300
STREAMS = 100


def _server(target: Target) -> psutil.Process:
    port = urlsplit(target.origin).port
    for connection in psutil.net_connections("tcp"):
        if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port:
            assert connection.pid is not None
            return psutil.Process(connection.pid)
    raise LookupError(f"no process listens on {port}")


def _mib(process: psutil.Process) -> float:
    return float(process.memory_info().rss) / 2**20


def _slow_reader(target: Target, server: psutil.Process, seconds: int) -> Row:
    body = prompts.body("chat", target.model, "Count from 1 to 2000.", 2000)
    body["stream"] = True
    payload = json.dumps(body).encode()
    parts = urlsplit(target.url("chat"))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    head = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    before = _mib(server)
    sock.sendall(head.encode() + payload)
    samples = []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        sock.recv(1)
        samples.append(_mib(server))
        time.sleep(1)
    sock.close()
    return Row(
        NAME,
        f"one stream read at 1 byte/s for {seconds} s",
        {"RSS before MiB": before, "RSS max MiB": max(samples), "RSS last MiB": samples[-1]},
    )


def _idle(target: Target, server: psutil.Process) -> Row:
    parts = urlsplit(target.origin)
    before = _mib(server)
    sockets = [socket.create_connection((parts.hostname, parts.port)) for _ in range(IDLE)]
    time.sleep(0.5)
    held = _mib(server)
    waited = 6.0  # past the default --keep-alive-timeout of 5 s
    time.sleep(waited)
    still_open = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            still_open += sock.recv(1) != b""
        except BlockingIOError:
            still_open += 1  # nothing to read, not closed
        sock.close()
    return Row(
        NAME,
        f"{IDLE} idle connections",
        {
            "RSS before MiB": before,
            "RSS held MiB": held,
            f"open after {waited:g} s": still_open,
        },
    )


async def _multiplexed(target: Target) -> Row:
    body = prompts.body("chat", target.model, "Say hi.", 8)
    body["stream"] = True
    started = time.perf_counter()
    async with httpx.AsyncClient(http2=True, http1=False, timeout=300) as client:

        async def one() -> bool:
            async with client.stream("POST", target.url("chat"), json=body) as response:
                text = (await response.aread()).decode()
            return response.http_version == "HTTP/2" and text.rstrip().endswith("[DONE]")

        done = await asyncio.gather(*(one() for _ in range(STREAMS)))
    return Row(
        NAME,
        f"{STREAMS} streams on one HTTP/2 connection",
        {"completed": sum(done), "wall s": time.perf_counter() - started},
    )


def run(run: Run) -> list[Row]:
    if not run.local:
        return []
    server = _server(run.ours)
    seconds = 10 if run.config.quick else 60
    return [
        _slow_reader(run.ours, server, seconds),
        _idle(run.ours, server),
        asyncio.run(_multiplexed(run.ours)),
    ]

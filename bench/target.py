"""What the bench measures: a server it starts itself (the embedded model, on a free port), or
one already running at a base URL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Target:
    origin: str  # http://host:port
    model: str

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1/infer"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _model(origin: str) -> str:
    return str(httpx.get(f"{origin}/v1/infer/models", timeout=30).json()["data"][0]["id"])


@contextmanager
def target(base_url: str | None, log: Path, *args: str) -> Iterator[Target]:
    """The server at `base_url` (its origin, or .../v1/infer), or one started for the run."""
    if base_url:
        origin = base_url.removesuffix("/").removesuffix("/v1/infer")
        yield Target(origin, _model(origin))
        return
    port = _free_port()
    command = [sys.executable, "-m", "server", "serve", "--port", str(port), *args]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=os.environ)
    origin = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(origin, process, log)
        yield Target(origin, _model(origin))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def _wait_ready(origin: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    print(f"starting a server on {origin} (log: {log})", file=sys.stderr)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited; see {log}")
        try:
            if httpx.get(f"{origin}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the server was not ready after {STARTUP_TIMEOUT_S:.0f} s; see {log}")

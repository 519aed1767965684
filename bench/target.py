"""What the bench measures: servers it starts itself (the embedded model, or the model-free
replay engine, on free ports), or one already running. A target knows where each protocol lives:
this server has both under /v1/infer; another server (SGLang's own) under its OpenAI base
(`http://host:30000/v1`) and its root for Anthropic's `/v1/messages`."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 600.0
PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """A bench that dies, however it dies (SIGKILL included), leaves no server behind: the server
    gets SIGTERM when its parent goes (Linux), and stops its engine as on any SIGTERM."""
    if sys.platform == "linux":
        ctypes.CDLL("libc.so.6").prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass(frozen=True)
class Target:
    name: str
    openai_base: str  # what the OpenAI SDK takes: + /chat/completions
    anthropic_base: str  # what the Anthropic SDK takes: + /v1/messages
    model: str
    ours: bool = True  # Server-Timing, b3os and /v1/requests are this server's
    group: int | None = None  # the process group of a server this run started

    def url(self, protocol: str) -> str:
        if protocol == "chat":
            return f"{self.openai_base}/chat/completions"
        if protocol == "responses":
            return f"{self.openai_base}/responses"
        return f"{self.anthropic_base}/v1/messages"

    @property
    def origin(self) -> str:
        return self.openai_base.split("/v1", 1)[0]


def from_url(name: str, base_url: str) -> Target:
    """A running server: this one (`.../v1/infer`), or another at its OpenAI base URL."""
    base = base_url.rstrip("/")
    if base.endswith("/v1/infer"):
        return Target(name, base, base, _model(base))
    root = base.removesuffix("/v1")
    return Target(name, f"{root}/v1", root, _model(f"{root}/v1"), ours=False)


def _model(openai_base: str) -> str:
    return str(httpx.get(f"{openai_base}/models", timeout=30).json()["data"][0]["id"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def started(name: str, log: Path, *args: str, command: str = "serve") -> Iterator[Target]:
    """A server started for the run, stopped after it: this one (`serve`), or SGLang's own HTTP
    server on the same model (`sglang-server`, measured at its OpenAI base URL)."""
    port = _free_port()
    argv = [sys.executable, "-m", "server", command, "--port", str(port), *args]
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=os.environ,
            preexec_fn=_stop_with_parent,
            start_new_session=True,  # a terminal's Ctrl-C reaches the bench, which stops it
        )
    origin = f"http://127.0.0.1:{port}"
    ours = command == "serve"
    try:
        _wait_ready(f"{origin}/readyz" if ours else f"{origin}/health_generate", process, log)
        target = from_url(name, f"{origin}/v1/infer" if ours else f"{origin}/v1")
        yield replace(target, group=process.pid)
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # SGLang's server has workers in its group
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    print(f"starting a server for {url} (log: {log})", file=sys.stderr)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited; see {log}")
        try:
            if httpx.get(url, timeout=30).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the server was not ready after {STARTUP_TIMEOUT_S:.0f} s; see {log}")


@contextmanager
def paused(targets: list[Target]) -> Iterator[None]:
    """The servers among `targets` that this run started stopped (SIGSTOP to their process
    groups) until the block ends: a server idle beside the one measured still takes CPU time
    (its scheduler's loop, its start-up's tail) on a machine of a few cores."""
    groups = [target.group for target in targets if target.group is not None]
    for group in groups:
        os.killpg(group, signal.SIGSTOP)
    try:
        yield
    finally:
        for group in groups:
            os.killpg(group, signal.SIGCONT)

"""A real server process on a free loopback port, for the API tests: `python -m server serve`,
`python -m server sglang-server` (SGLang's own HTTP server) or `sglang-router` (the router's own
launcher), its log kept in a file, stopped with SIGTERM. It runs in a process group of its own,
so that killing it kills SGLang's workers too. A node or SGLang's server is forked from the
session's `Zygote` where there is one (tests/zygote.py), rather than importing everything again.
`Shutdowns` stops a session's servers together; `StartQueue` starts them one after another in
the background."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar, TypeVar

import httpx

T = TypeVar("T")

# A fresh machine converts the embedded model first. Well under pytest's own timeout (600 s),
# so that a server that never gets ready fails with its log, not with pytest's stack dump.
STARTUP_TIMEOUT_S = 300.0
PR_SET_PDEATHSIG = 1
FORKED = ("serve", "sglang-server")  # the commands a zygote forks (`python -m server COMMAND`)


def stop_with_parent() -> None:
    """A test run that dies (killed CI job, crashed harness) leaves no server behind: the server
    gets SIGTERM when its parent goes (Linux), and stops its engine as on any SIGTERM."""
    if sys.platform == "linux":
        ctypes.CDLL("libc.so.6").prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def exit_status(code: object) -> int:
    """A `SystemExit` code as the interpreter turns it into its exit status: None is 0, a
    message 1 (the interpreter prints it first)."""
    if isinstance(code, int):
        return code
    if code is not None:
        print(code, file=sys.stderr)
    return int(code is not None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Forked:
    """A node the zygote forked, with what ServerProcess uses of Popen's interface."""

    def __init__(self, zygote: Zygote, pid: int, argv: list[str]) -> None:
        self._zygote = zygote
        self.pid = pid
        self.args = argv
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


class Zygote:
    """`python -m tests.zygote`: nodes forked from a process that imported what they import."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=stop_with_parent,
        )

    def _ask(self, request: dict[str, object]) -> dict[str, int | None]:
        assert self._process.stdin is not None and self._process.stdout is not None
        with self._lock:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote exited ({self._process.wait()}); its error is above")
        return dict(json.loads(line))

    def spawn(self, argv: list[str], env: dict[str, str], log: Path) -> Forked:
        reply = self._ask({"spawn": {"argv": argv, "env": env, "log": str(log)}})
        pid = reply["pid"]
        assert pid is not None
        return Forked(self, pid, argv)

    def status(self, pid: int) -> int | None:
        return self._ask({"status": pid})["code"]

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=30)


class ServerProcess:
    # The session's zygote (tests/conftest.py sets it): nodes fork from it where it is set.
    zygote: ClassVar[Zygote | None] = None

    def __init__(
        self,
        log_path: Path,
        *args: str,
        scheme: str = "http",
        command: str = "serve",
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.env = env or {}
        self.scheme = scheme
        self.log_path = log_path
        self.command = command
        own = {"serve": ["--node-name", "test-node"], "sglang-server": ["--log-level", "warning"]}
        self.args = ["--port", str(self.port), *own.get(command, []), *args]
        self._process: subprocess.Popen[bytes] | Forked | None = None

    @property
    def origin(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What SDKs take as base URL; they append /v1/messages or /chat/completions."""
        return f"{self.origin}/v1/infer"

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        # A node or SGLang's server forks from the zygote, except one whose environment changes
        # what it imports.
        if self.zygote is not None and self.command in FORKED and "PYTHONPATH" not in self.env:
            self._process = self.zygote.spawn([self.command, *self.args], env, self.log_path)
            return
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "server", self.command, *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=stop_with_parent,
            start_new_session=True,
        )

    def mapped_files(self) -> set[str]:
        """The files mapped by the server's processes (it and every process it started): the
        shared libraries they loaded among them."""
        import psutil

        assert self._process is not None, "not started"
        root = psutil.Process(self._process.pid)
        mapped: set[str] = set()
        for process in [root, *root.children(recursive=True)]:
            try:
                maps = Path(f"/proc/{process.pid}/maps").read_text()
            except OSError:  # ended meanwhile
                continue
            mapped.update(line.split()[-1] for line in maps.splitlines() if "/" in line)
        return mapped

    @contextmanager
    def running(
        self, ready: str = "/readyz", shutdowns: Shutdowns | None = None
    ) -> Iterator[ServerProcess]:
        """Started and, once GET `ready` answers 200, in use; stopped on leaving (or, with
        `shutdowns`, signalled to stop on leaving and waited for with the others)."""
        self.start()
        try:
            self.wait_for(ready)
            yield self
        finally:
            if shutdowns is None:
                self.stop()
            else:
                shutdowns.stop_later(self)

    def wait_listening(self, verify: ssl.SSLContext | bool = True) -> None:
        """Until the listener answers (the engine may still be starting)."""
        self._wait_for("/healthz", verify)

    def wait_ready(self, verify: ssl.SSLContext | bool = True) -> None:
        """Until the engine answers requests."""
        self._wait_for("/readyz", verify)

    def wait_for(
        self, path: str, verify: ssl.SSLContext | bool = True, *, deadline: float | None = None
    ) -> None:
        """Until GET `path` answers 200; by `deadline` (monotonic seconds) where given."""
        self._wait_for(path, verify, deadline)

    def _wait_for(
        self, path: str, verify: ssl.SSLContext | bool, deadline: float | None = None
    ) -> None:
        assert self._process is not None
        if deadline is None:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
        with httpx.Client(verify=verify, timeout=5) as client:
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    raise RuntimeError(f"server exited early:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.origin}{path}").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        raise RuntimeError(f"{self.origin}{path} not answering 200 in time:\n{self.log_tail()}")

    def terminate(self) -> None:
        """SIGTERM, not waiting for the exit."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)

    def stop(self) -> int | None:
        """SIGTERM, then the exit (SIGKILL after a minute)."""
        if self._process is None:
            return None
        self.terminate()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
        return self._process.returncode

    def wait_exit(self, timeout: float) -> int:
        """The exit code of a process expected to stop by itself (a refused start)."""
        assert self._process is not None
        try:
            return self._process.wait(timeout=timeout)
        finally:
            self.stop()

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def kill(self) -> None:
        """SIGKILL to the whole process group: a crash, with no chance to say goodbye."""
        assert self._process is not None
        os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


class Shutdowns:
    """Servers stopped together: each is signalled when its user is done with it, and all are
    waited for at the end, then what was to be reported of them once stopped (their logs' tails)
    is. SGLang takes seconds to drain and exit; one after another, a session's servers took half
    a minute to stop."""

    def __init__(self) -> None:
        self._stopping: list[ServerProcess] = []
        self._reports: list[Callable[[], None]] = []

    def stop_later(self, process: ServerProcess) -> None:
        process.terminate()
        self._stopping.append(process)

    def report_later(self, report: Callable[[], None]) -> None:
        self._reports.append(report)

    def wait(self) -> None:
        for process in self._stopping:
            process.stop()
        for report in self._reports:
            report()
        self._stopping.clear()
        self._reports.clear()


class StartQueue:
    """Servers started in a background thread, one after another, each once the one before it is
    ready: a start keeps both cores of a small machine busy for 30-60 s, so starts side by side
    only slow each other, while the tests running meanwhile leave part of the cores idle. A
    server whose user is done before its turn never starts."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="server-start")
        self._lock = threading.Lock()
        self._dropped: set[ServerProcess] = set()

    def submit(self, processes: Sequence[ServerProcess], ready: Callable[[], T]) -> Future[T]:
        """`processes` started in their turn, then `ready` (which waits for them) run."""

        def start() -> T:
            with self._lock:
                if self._dropped.intersection(processes):
                    raise RuntimeError("stopped before its turn to start")
                for process in processes:
                    process.start()
            return ready()

        return self._pool.submit(start)

    def stop_later(self, processes: Sequence[ServerProcess], shutdowns: Shutdowns) -> None:
        """`processes` stopped with `shutdowns`' others, or never started if not yet."""
        with self._lock:
            self._dropped.update(processes)
            for process in processes:
                shutdowns.stop_later(process)

    def close(self) -> None:
        """Once every start has ended: a start whose processes were stopped ends with them."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def ignored_signals(pid: int) -> int:
    """The mask of signals the process ignores (bit n-1 for signal n), as Linux reports it."""
    status = Path(f"/proc/{pid}/status").read_text()
    [mask] = [line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")]
    return int(mask, 16)

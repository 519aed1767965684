"""The suite as `make test` runs it: its shards (SHARDS in tests/conftest.py) in two pytest
processes side by side, each line of their output shown as it comes, under its shard's name, and
each shard's verdict at the end, after its slowest setups, calls and teardowns; then how low the
machine's free memory went. `python -m tests.shards [pytest arguments]`; the arguments go to
both (`-k chat`, a path). Exits 0 when every shard passed or selected nothing and one ran tests.

Each engine the shards start computes on one thread (OMP_NUM_THREADS=1): two engines of two
threads each on two cores wait on each other's threads, and one shard's agent turn then took
minutes where it takes seconds alone."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from tests.conftest import SHARDS

NO_TESTS = 5  # pytest's exit code for a selection with nothing in it
SLOWEST = 30  # each shard ends with its slowest setups, calls and teardowns: where its time goes
PRESSURE = Path("/proc/pressure/memory")  # Linux's pressure stall information, where it has it
GIB = 2**30
WIDTH = max(map(len, SHARDS))


class Shard(threading.Thread):
    """One shard's pytest process: its output relayed line by line under its name, and its exit
    code and time once it ends."""

    def __init__(self, name: str, argv: list[str], lock: threading.Lock) -> None:
        super().__init__(name=name, daemon=True)
        self._lock = lock
        self._began = time.monotonic()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "pytest", "--shard", name, f"--durations={SLOWEST}",
             "-o", f"cache_dir=.pytest_cache/{name}", *argv],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        self.code: int | None = None

    def run(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._say(line)
        self.code = self._process.wait()
        self._say(f"exit code {self.code} after {time.monotonic() - self._began:.0f} s\n")

    def _say(self, line: str) -> None:
        with self._lock:
            sys.stdout.write(f"[{self.name:<{WIDTH}}] {line}")
            sys.stdout.flush()


class Memory(threading.Thread):
    """The machine's memory while the shards run: the least free, and the seconds every process
    stalled waiting on it. The engines of both shards share it; near its end the kernel drops
    the pages of their code and weights and reads them back, and every process crawls."""

    def __init__(self) -> None:
        super().__init__(name="memory", daemon=True)
        self._done = threading.Event()
        self._stalled = _stalled_s()
        self.least = psutil.virtual_memory().available

    def run(self) -> None:
        while not self._done.wait(1.0):
            self.least = min(self.least, psutil.virtual_memory().available)

    def report(self) -> str:
        self._done.set()
        total = psutil.virtual_memory().total
        said = f"free memory at its least: {self.least / GIB:.1f} GiB of {total / GIB:.1f}"
        if self._stalled is None or (stalled := _stalled_s()) is None:
            return said
        return f"{said}; every process stalled on it for {stalled - self._stalled:.0f} s"


def _stalled_s() -> float | None:
    """Seconds in which every process waited on memory, since boot (PSI's `full` total)."""
    try:
        lines = PRESSURE.read_text().splitlines()
    except OSError:
        return None
    [full] = [line for line in lines if line.startswith("full ")]
    return int(full.rsplit("total=", 1)[1]) / 1e6


def verdict(codes: list[int]) -> int:
    if all(code == NO_TESTS for code in codes):
        return NO_TESTS
    failed = [code for code in codes if code not in (0, NO_TESTS)]
    return failed[0] if failed else 0


def main(argv: list[str]) -> int:
    lock = threading.Lock()
    memory = Memory()
    memory.start()
    shards = [Shard(name, argv, lock) for name in SHARDS]
    for shard in shards:
        shard.start()
    try:
        for shard in shards:
            shard.join()
    except KeyboardInterrupt:  # it reached the shards too (one process group): they end, and say
        for shard in shards:
            shard.join()
    code = verdict([NO_TESTS if shard.code is None else shard.code for shard in shards])
    print(memory.report(), flush=True)
    print(f"the suite's shards: {'passed' if code == 0 else f'exit code {code}'}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

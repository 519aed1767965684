"""When `b3os-infer sglang-server` forks SGLang's processes (server/engines/sglang/cpu_fork.py):
only from a process with one thread, since a fork copies the locks the others hold."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from server.engines.sglang.cpu_fork import fork_after_spawn_is_set


@pytest.fixture
def start_method() -> Iterator[None]:
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)  # as SGLang leaves it
    yield
    multiprocessing.set_start_method(before, force=True)


def test_a_process_with_one_thread_forks() -> None:
    # in a process of its own: this one may run other tests' threads
    script = (
        "import multiprocessing\n"
        "from server.engines.sglang.cpu_fork import fork_after_spawn_is_set\n"
        "multiprocessing.set_start_method('spawn')\n"
        "fork_after_spawn_is_set(None)\n"
        "print(multiprocessing.get_start_method())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.strip() == "fork", done.stderr


def test_a_process_running_other_threads_keeps_spawn(start_method: None) -> None:
    del start_method
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        fork_after_spawn_is_set(None)
    finally:
        stop.set()
        other.join()
    assert multiprocessing.get_start_method() == "spawn"

"""`b3os-infer sglang-server` on a CPU forks SGLang's scheduler and detokenizer from the server
process (server/engines/sglang/cpu_fork.py): a forked process keeps its parent's signal handlers,
so each is checked to leave a terminal's Ctrl-C (SIGINT to the process group) to the server, as
a spawned one did; that they serve is what every remote test checks."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil

from tests.server_process import ServerProcess


def ignored_signals(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    [mask] = [line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")]
    return int(mask, 16)


def test_sglangs_processes_leave_sigint_to_the_server(sglang_server: ServerProcess) -> None:
    # By their parent, not their names: SGLang names them with setproctitle, which in a forked
    # process does not take where the server was started with PYTHONPATH already set.
    processes = psutil.Process(sglang_server.pid).children()
    assert len(processes) >= 2, processes  # the scheduler and the detokenizer
    sigint = 1 << (signal.SIGINT - 1)
    for process in processes:
        assert ignored_signals(process.pid) & sigint, process
    assert not ignored_signals(sglang_server.pid) & sigint  # the server stops on it

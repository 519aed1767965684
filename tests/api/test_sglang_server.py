"""`b3os-infer sglang-server`'s processes (SGLang's scheduler and detokenizer, and
multiprocessing's resource tracker) leave a terminal's Ctrl-C (SIGINT to the process group) to
the server, which stops them: none dies of it with its own KeyboardInterrupt traceback."""

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
    processes = psutil.Process(sglang_server.pid).children()
    assert len(processes) >= 2, processes  # at least the scheduler and the detokenizer
    sigint = 1 << (signal.SIGINT - 1)
    for process in processes:
        assert ignored_signals(process.pid) & sigint, process
    assert not ignored_signals(sglang_server.pid) & sigint  # the server stops on it

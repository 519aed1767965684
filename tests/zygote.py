"""A Python process that has imported what a node imports at start (torch, transformers, SGLang's
template detection, reasoning and tool-call parsers, the node's app, SGLang's Engine and model
classes), from which the tests' nodes and SGLang servers are forked: each then skips importing
all of that again, and a node's engine forkserver too (tests/forkserver_standby.py). `python -m
tests.zygote`, driven by `Zygote` (tests/server_process.py) over its stdin and stdout, one JSON
line each way per request:

- `{"spawn": {"argv": [...], "env": {...}, "log": path}}`: a node forked, as `python -m server
  <argv>` would run, in a session of its own, its output appended to `log`, its environment
  `env`; answered `{"pid": n}`;
- `{"status": pid}`: answered `{"code": n}` once that node has exited (as Popen's returncode),
  `{"code": null}` while it runs.

A forked node exits as the interpreter would (its atexit handlers run), never back into this
loop."""

from __future__ import annotations

import atexit
import importlib
import json
import os
import sys
import threading
import traceback
from typing import NoReturn

from tests.forkserver_standby import stand_by
from tests.server_process import exit_status, stop_with_parent

# What a node imports before its engine starts: its app, and SGLang's pieces it reads a model's
# format with (and with them torch and transformers).
PREIMPORTED = (
    "server.cli",
    "server.serve",
    "server.app",
    "sglang.srt.parser.template_detection",
    "sglang.srt.parser.reasoning_parser",
    "sglang.srt.function_call.function_call_parser",
)


# On a CPU, what a node with the in-process engine imports next: SGLang's Engine (its scheduler's
# module among them), after the CPU runtime's stand-ins are on the path; and what its forkserver
# imports (server/engines/sglang/preload.py), which forks from it here (tests/
# forkserver_standby.py). Each then loads SGLang's plugins, which apply their hooks to modules
# already imported.
ENGINE_MODULES = ("sglang.srt.entrypoints.engine", "sglang.srt.managers.detokenizer_manager")


def preimport() -> None:
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()  # as the node does before transformers' vision modules
    from server.engines.sglang import cpu_compat
    from server.engines.sglang.args import default_device

    cpu = default_device() == "cpu"
    if cpu:  # first: SGLang reads it once (`is_cpu`), and its modules at their import
        cpu_compat.prepare_cpu_runtime()
    for name in PREIMPORTED:
        importlib.import_module(name)
    if cpu:
        for name in ENGINE_MODULES:
            importlib.import_module(name)
        from sglang.srt.models.registry import ModelRegistry

        ModelRegistry.get_supported_archs()  # every model class's module, as the preload does


def reap(exited: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        exited[pid] = os.waitstatus_to_exitcode(status)


def spawn(argv: list[str], env: dict[str, str], log: str) -> int:
    sys.stdout.flush()
    pid = os.fork()
    if pid:
        return pid
    node(argv, env, log)


def node(argv: list[str], env: dict[str, str], log: str) -> NoReturn:
    """The forked child: a session of its own (killed as a group), gone with the zygote, its
    output in its log, then `python -m server <argv>`."""
    os.setsid()
    stop_with_parent()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    from setproctitle import setproctitle

    from server.cli import main

    sys.argv = [sys.executable, "-m", "server", *argv]
    setproctitle(" ".join(sys.argv))  # before the environment changes: it moves what it reads
    os.environ.clear()
    os.environ.update(env)
    if argv[0] == "serve":
        stand_by()  # its engine's forkserver, forked from here rather than started fresh
    code: object = 1
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    except BaseException:
        traceback.print_exc()
    # The interpreter's exit (its threads joined, its atexit handlers run), less its teardown of
    # every module it imported: seconds, with torch's and SGLang's, at each stop of a node.
    status = exit_status(code)
    getattr(threading, "_shutdown")()  # noqa: B009 (private: what the interpreter calls first)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def main() -> None:
    preimport()
    # A fork copies only the thread that forks: a lock another thread held would stay locked.
    assert threading.active_count() == 1, threading.enumerate()
    exited: dict[int, int] = {}
    while line := sys.stdin.readline():
        request = json.loads(line)
        reap(exited)
        if "spawn" in request:
            reply = {"pid": spawn(**request["spawn"])}
        else:
            reply = {"code": exited.get(int(request["status"]))}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    os._exit(0)  # its input closed: gone without the seconds of tearing its modules down


if __name__ == "__main__":
    main()

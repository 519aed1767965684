"""The forkserver of a node forked from the zygote (tests/zygote.py), itself forked rather than
started fresh. The node's in-process engine starts multiprocessing's forkserver
(server/engines/sglang/forkserver.py), which runs `python -c "from multiprocessing.forkserver
import main; main(...)"`: a new interpreter importing torch and SGLang again, seconds of CPU at
every node start. Here a process forked at the node's start, while it has one thread and the
zygote's imports, stands by; when the node launches its forkserver, multiprocessing's
`util.spawnv_passfds` hands that command, its file descriptors, the node's environment and
working directory to the standby, which runs it as the new interpreter would. The forkserver is
the node's child either way, and runs multiprocessing's own code with the node's preload. Where
multiprocessing launches it otherwise (another command, another function), the node starts it
fresh as before: slower, never different."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Sequence
from multiprocessing import util
from typing import NoReturn

from tests.server_process import exit_status

FORKSERVER_COMMAND = "from multiprocessing.forkserver import main;"
MOVED_ABOVE = 1000  # received descriptors pass through numbers above the ones a command names
MESSAGE_BYTES = 1 << 20  # at most: the command and the node's environment
TITLE = "tests.zygote: a node's forkserver, standing by"


def stand_by() -> None:
    """In a node just forked from the zygote (one thread): fork the standby, and route the
    node's first forkserver launch to it. A node that launches none leaves it to exit with it."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        ours.close()
        _standby(theirs)
    theirs.close()
    launch = util.spawnv_passfds
    used = False

    def spawnv_passfds(path: str, args: Sequence[str], passfds: Sequence[int]) -> int:
        nonlocal used
        if used or not args[-1].startswith(FORKSERVER_COMMAND):
            return launch(path, args, passfds)
        used = True
        request = {"code": args[-1], "fds": list(passfds), "cwd": os.getcwd(),
                   "env": dict(os.environ)}  # fmt: skip
        socket.send_fds(ours, [json.dumps(request).encode()], list(passfds))
        ours.close()
        return pid

    util.spawnv_passfds = spawnv_passfds


def _standby(sock: socket.socket) -> NoReturn:
    """Wait for the forkserver's command, then run it here: its descriptors at the numbers it
    names, the node's environment, the signal dispositions a new interpreter starts with."""
    code = 1
    try:
        from setproctitle import setproctitle

        setproctitle(TITLE)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the node's to act on
        keep = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, MOVED_ABOVE)
        os.closerange(3, MOVED_ABOVE)  # none of the node's descriptors but its output
        sock = socket.socket(fileno=keep)
        message, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, 16)  # one message: the request
        if not message:  # the node exited without launching a forkserver
            os._exit(0)
        sock.close()
        request = json.loads(message)
        _place(fds, request["fds"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _as_a_new_interpreter()
        exec(request["code"], {"__name__": "__main__"})  # multiprocessing's own command
        code = 0
    except SystemExit as stop:  # the forkserver's end: its clients gone
        code = exit_status(stop.code)
    except BaseException:
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never the node's atexit handlers (its metrics folder, its engine)


def _place(received: Sequence[int], wanted: Sequence[int]) -> None:
    """Each received descriptor at the number the command names for it."""
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, MOVED_ABOVE) for fd in received]
    for fd in received:
        os.close(fd)
    for source, target in zip(moved, wanted, strict=True):
        os.dup2(source, target)
        os.close(source)


def _as_a_new_interpreter() -> None:
    handlers: dict[int, Callable[..., object] | int] = {
        signal.SIGINT: signal.default_int_handler,
        signal.SIGTERM: signal.SIG_DFL,
        signal.SIGCHLD: signal.SIG_DFL,
    }
    for number, handler in handlers.items():
        signal.signal(number, handler)
    signal.set_wakeup_fd(-1)

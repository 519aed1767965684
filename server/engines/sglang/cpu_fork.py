"""SGLang's scheduler and detokenizer forked, not spawned, from `b3os-infer sglang-server` on a
CPU: a spawned process imports torch, transformers and SGLang again (about 28 of the 65 CPU
seconds of a start, measured on this 2-core machine), a forked one inherits them. The server is
ready in about 31 s instead of 45.

SGLang forces `spawn` (for CUDA, which a forked process cannot use) in `_set_envs_and_config`,
just before it starts its processes; an AFTER hook on it sets `fork` back, on a CPU only, and
only while the process has one thread (a fork copies the locks other threads hold). Two things a
fork would carry over are undone in the child:
- OpenMP: a process whose parent had run a parallel region hangs at its own first one (GNU
  libgomp). The parent here runs none before this point: it parses arguments and loads plugins;
  the model and every tensor op live in the scheduler.
- SIGINT: the parent's handler, where a spawned process had SGLang's plugin set it ignored
  (`plugin.py`; `load_plugins` runs once per process, and a forked one counts as loaded). The
  child ignores it here, so a terminal's Ctrl-C is the parent's to handle.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from typing import Any

log = logging.getLogger(__name__)

TARGET = "sglang.srt.entrypoints.engine._set_envs_and_config"


def install() -> None:
    """Call in the main process before SGLang's `load_plugins`, which applies the hook."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, fork_after_spawn_is_set, HookType.AFTER)
    os.register_at_fork(after_in_child=_leave_sigint_to_parent)


def fork_after_spawn_is_set(result: Any, *args: Any, **kwargs: Any) -> None:
    del result, args, kwargs
    if threading.active_count() != 1:
        log.info("SGLang's processes are spawned: this process runs other threads")
        return
    multiprocessing.set_start_method("fork", force=True)


def _leave_sigint_to_parent() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)

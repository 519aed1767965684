"""What SGLang's forkserver imports before it forks SGLang's processes (`forkserver.py`): the
scheduler's and the detokenizer's modules and every model class SGLang's registry would import
in the scheduler, and SGLang's plugins, this node's among them, loaded and their hooks applied;
its notices kept at debug as in each process.

Python 3.11's forkserver is handed the node's `sys.path` but does not apply it (its children
do), so the CPU runtime's stand-ins go on it here first. multiprocessing ignores a preload's
ImportError, and the children would then import everything themselves, slowly and silently: one
is raised as a RuntimeError instead, so that the forkserver, and with it the engine's start,
fails with the reason. Once all is imported, the forkserver's process title says so."""

import signal

from server.engines.sglang import cpu_compat
from server.engines.sglang.forkserver import TITLE, freeze_inherited_objects

cpu_compat.prepare_cpu_runtime()
try:
    from setproctitle import setproctitle

    from server.engines.sglang import notices, plugin

    notices.install()
    from sglang.srt.managers import detokenizer_manager, scheduler
    from sglang.srt.models.registry import ModelRegistry
    from sglang.srt.plugins import load_plugins
except ImportError as error:
    raise RuntimeError(
        f"SGLang's forkserver cannot import its processes' modules: {error}"
    ) from error

ModelRegistry.get_supported_archs()  # imports the model modules, once for every process forked
# SGLang's processes inherit the plugins loaded and their hooks applied, and skip both (its
# load_plugins is idempotent); with them, SIGINT ignored: a terminal's Ctrl-C reaches the whole
# process group, and the node stops them when it stops (forked children restore the handlers
# the forkserver found at its start, which this preload sets).
signal.signal(signal.SIGINT, signal.SIG_IGN)
load_plugins()
freeze_inherited_objects()
setproctitle(TITLE)
__all__ = ["detokenizer_manager", "plugin", "scheduler"]

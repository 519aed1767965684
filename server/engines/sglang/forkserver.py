"""SGLang's scheduler and detokenizer on a CPU, forked from a process that has imported them.

SGLang starts each of its processes fresh (multiprocessing's spawn), and each imports SGLang
again, as this process does: three imports of the same modules, the children's only after this
process's own, most of a start. Here a forkserver (multiprocessing's own) is started first, with
the environment they need, and imports SGLang's scheduler, detokenizer and model classes while
this process reads the model and imports SGLang; SGLang's processes are then forked from it.

On a CPU only: SGLang's environment changes after this point (`_set_envs_and_config`: its run
id for the GPU offloader, NCCL's, CUDA's and CuTe DSL's settings, the device ids it sets around
each start) are a GPU's; the Prometheus folder its metrics share is made here, before the fork
server, where SGLang would make it after. The forkserver never runs torch's thread pool, so the
processes forked from it start OpenMP cleanly."""

from __future__ import annotations

import atexit
import gc
import multiprocessing
import os
import shutil
import tempfile
from multiprocessing import forkserver
from typing import Any

from server.config import Settings
from server.engines.sglang import cpu_compat, pins
from server.engines.sglang.args import default_device, runtime_env

STARTED = "B3OS_INFER_FORKSERVER"  # set once the forkserver runs: SGLang's processes fork from it
PRELOAD = ["server.engines.sglang.preload"]
TITLE = "b3os-infer::forkserver"  # the forkserver's process title, once its preload is imported
METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"


def start(settings: Settings) -> None:
    """Idempotent. SGLang's and torch's versions checked first, at every call (a refused start
    starts no forkserver), then everything SGLang's processes read from the environment: the
    CPU runtime's, the compiled kernels, the node's runtime settings; then this process's CPU
    runtime. torch is imported only then (where it is a CPU build): the forkserver imports it,
    and SGLang, meanwhile."""
    device = settings.device or default_device()
    pins.check_versions(device)  # what refuses a start, before the seconds of one
    if device != "cpu":
        return
    if os.environ.get(STARTED) != "1":
        _start(settings)
        cpu_compat.prepare_cpu_runtime()


def _start(settings: Settings) -> None:
    cpu_compat.cpu_environment()  # the forkserver's preload prepares the rest of its runtime
    cpu_compat.compile_kernels(settings.cache_dir)
    os.environ.update(runtime_env(settings))
    if METRICS_DIR not in os.environ:  # as SGLang would make it, and gone when this process is
        folder = tempfile.mkdtemp(prefix="b3os-infer-metrics-")
        atexit.register(shutil.rmtree, folder, True)
        os.environ[METRICS_DIR] = folder
    multiprocessing.set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()
    os.environ[STARTED] = "1"


def freeze_inherited_objects() -> None:
    """In the forkserver: each process forked from it moves the objects it inherits (every module
    imported here) to the garbage collector's permanent generation (`gc.freeze`, as Python's
    documentation advises for processes that fork without exec). A full collection there, which
    SGLang runs before it sizes the memory pool and Python runs now and then while it serves,
    then walks only the objects the process made itself; and it leaves the inherited pages
    shared. Frozen in the child, not here: the forkserver ends with an interpreter shutdown, which
    would report the frozen objects of native modules as leaks; its children end in `os._exit`."""
    os.register_at_fork(after_in_child=gc.freeze)


def forked(result: Any, *args: Any, **kwargs: Any) -> Any:
    """After SGLang's `_set_envs_and_config`, which chooses spawn for its processes: where the
    forkserver runs, they fork from it."""
    del args, kwargs
    if os.environ.get(STARTED) == "1":
        multiprocessing.set_start_method("forkserver", force=True)
    return result

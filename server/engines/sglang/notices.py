"""SGLang's notices that ask nothing of this node's operator, demoted to debug in each of its
processes (the plugin installs the filters): they are shown only when SGLang logs at info, which
`--log-level debug` sets (engine args). Each is a choice this node made or a part it does not
use: its list of model modules that do not import here, the sampling backend deterministic
inference takes, AMX and CUDA absent on a CPU, the SIGQUIT handler the node's supervisor stands
in for, the CPU all-reduce of tensor parallelism, the open-files limit it could not raise."""

from __future__ import annotations

import logging

SGLANG = "sglang"
NOTICES = {  # logger: the starts of its messages that are notices
    "sglang.srt.models.registry": ("Ignore import error when loading",),
    "sglang.srt.arg_groups.overrides": (
        "Sampling backend is set to pytorch for deterministic inference",
        "The current platform does not support Intel AMX",
    ),
    "sglang.srt.entrypoints.engine": ("Signal handler is not added because",),
    "sglang.srt.distributed.bootstrap": ("init_cpu_threads_env and shared memory",),
    "sglang.srt.utils.common": ("Fail to set RLIMIT_NOFILE",),
    "sglang.kernels.jit.utils.arch": ("Cannot detect CUDA architecture",),
}


def install() -> None:
    """Idempotent."""
    for name, starts in NOTICES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(each, _AtDebug) for each in logger.filters):
            logger.addFilter(_AtDebug(starts))


class _AtDebug(logging.Filter):
    def __init__(self, starts: tuple[str, ...]) -> None:
        super().__init__()
        self._starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(self._starts):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(SGLANG).getEffectiveLevel() <= logging.INFO

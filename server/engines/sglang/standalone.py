"""`b3os-infer sglang-server`: SGLang's own HTTP server, started the way SGLang's launcher starts
it, on the model `--model` resolves to (the embedded default included) and, on a CPU, with the
compatibility pieces of the in-process engine. It is what `--engine sglang-remote` talks to in the
tests, and what a user on a CPU without AMX needs to run SGLang's server at all."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from server.config import Settings
from server.engines.sglang import cpu_compat, pins
from server.engines.sglang.args import runtime_env, server_args
from server.models.source import resolve

log = logging.getLogger(__name__)


def cli_args(args: dict[str, Any]) -> list[str]:
    """SGLang's server arguments as its command line: {"tp_size": 2, "enable_metrics": True}
    -> ["--tp-size", "2", "--enable-metrics"]."""
    argv: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv += [flag, str(value)]
    return argv


def run(settings: Settings, sglang_args: Sequence[str] = ()) -> int:
    """Serves until SGLang's server stops (SIGTERM, SIGINT). `sglang_args` are SGLang's own
    flags; they come last, so they win over the ones derived from the settings."""
    source = resolve(settings)
    args = server_args(settings, source)
    args.update(host=settings.host, port=settings.port, log_level=settings.log_level)
    if args["device"] == "cpu":
        cpu_compat.prepare_cpu_runtime()
        cpu_compat.compile_kernels(settings.cache_dir)
    os.environ.update(runtime_env(settings))
    pins.check_versions(args["device"])
    from sglang.launch_server import run_server
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    load_plugins()
    pins.check_hooks()
    argv = [*cli_args(args), *sglang_args]
    log.info("starting SGLang's HTTP server: %s", " ".join(argv))
    try:
        run_server(prepare_server_args(argv))
    except KeyboardInterrupt:  # a terminal's Ctrl-C: uvicorn has shut down, and re-raises it
        log.info("SGLang's HTTP server stopped (SIGINT)")
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
    return 0

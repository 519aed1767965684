"""The `b3os-infer` command (also `python -m server`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from server import admin, config

SGLANG_DEFAULT_PORT = 30000  # SGLang's own
# The settings that mean something to SGLang's server (the rest are this server's own).
SGLANG_SERVER_OPTIONS = (
    "host",
    "port",
    "device",
    "model",
    "served_model_name",
    "context_length",
    "cache_dir",
    "log_level",
    "mem_fraction_static",
    "tp_size",
    "max_running_requests",
    "max_total_tokens",
    "max_queue_wait",
)
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="b3os-infer",
        description="The Anthropic Messages and OpenAI Chat Completions APIs on SGLang.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve", help="serve the model over HTTP (default: the embedded SmolLM2-135M-Instruct)"
    )
    config.add_arguments(serve)
    sglang_server = commands.add_parser(
        "sglang-server",
        help="SGLang's own HTTP server on the same model, with the CPU compatibility pieces "
        "(what --engine sglang-remote talks to)",
        description="Starts SGLang's HTTP server (POST /generate, GET /health_generate, ...) on "
        "the model --model resolves to. SGLang's own flags go after `--`.",
    )
    config.add_arguments(sglang_server, SGLANG_SERVER_OPTIONS, port=str(SGLANG_DEFAULT_PORT))
    sglang_server.add_argument(
        "sglang_args", nargs=argparse.REMAINDER, help="-- then flags for SGLang's server"
    )
    sglang_router = commands.add_parser(
        "sglang-router",
        help="sglang-router's own launcher (pip install sglang-router), with the CPU "
        "compatibility piece the light install needs to import it",
        add_help=False,
    )
    sglang_router.add_argument("router_args", nargs=argparse.REMAINDER, help="its flags")
    admin.add_commands(commands, lambda command: config.add_arguments(command, ("db",)))
    return parser


def configure_logging(level: str) -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise SystemExit(f"unknown log level {level!r}: use debug, info, warning or error")
    logging.basicConfig(level=numeric, format=LOG_FORMAT, stream=sys.stderr, force=True)
    if numeric > logging.DEBUG:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per call to a remote engine


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sglang-router"]:  # every flag after it is the router's, --help included
        return _sglang_router(argv[1:])
    args = build_parser().parse_args(argv)
    if (
        args.command == "sglang-server"
        and args.port is None
        and config.env_name("port") not in os.environ
    ):
        args.port = SGLANG_DEFAULT_PORT
    settings = config.settings_from(args)
    configure_logging(settings.log_level)
    if args.command == "serve":
        return _serve(settings)
    if args.command == "sglang-server":
        return _sglang_server(settings, args.sglang_args)
    return admin.run(args, settings.db)


def _serve(settings: config.Settings) -> int:
    from server.serve import serve

    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(settings))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(serve(settings))


def _sglang_router(router_args: list[str]) -> int:
    """The router's launcher imports SGLang where it is installed, and with it torchvision,
    which the light CPU install needs a fix for (server.torch_compat)."""
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()
    try:
        from sglang_router.launch_router import launch_router, parse_router_args
    except ImportError:
        print("sglang-router is not installed: pip install sglang-router", file=sys.stderr)
        return 1
    launch_router(parse_router_args(router_args))
    return 0


def _sglang_server(settings: config.Settings, sglang_args: list[str]) -> int:
    from server.engines.sglang.standalone import run
    from server.models.embedded import ModelSetupError

    try:
        return run(settings, sglang_args[1:] if sglang_args[:1] == ["--"] else sglang_args)
    except ModelSetupError as error:
        logging.getLogger(__name__).error("cannot start: %s", error)
        return 1

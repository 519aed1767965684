"""The `b3os-infer` command (also `python -m server`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from server import config

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
    return parser


def configure_logging(level: str) -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise SystemExit(f"unknown log level {level!r}: use debug, info, warning or error")
    logging.basicConfig(level=numeric, format=LOG_FORMAT, stream=sys.stderr, force=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = config.settings_from(args)
    configure_logging(settings.log_level)
    if args.command == "serve":
        return _serve(settings)
    return 2


def _serve(settings: config.Settings) -> int:
    from server.serve import serve

    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(settings))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(serve(settings))

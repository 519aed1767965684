"""python -m bench [SCENARIO ...] [--out DIR] [--quick] [--base-url URL] [--compare-url URL]
                [--compare-sglang] [--server-args FLAGS]

Runs the scenarios (all by default) against a server it starts (the embedded model on this
machine, or what --server-args name), or the one at --base-url, and writes results.md,
results.json and results.png to a new folder under --out. --compare-url runs the latency sweep
against another server too (its OpenAI base URL, e.g. SGLang's own at http://host:30000/v1) and
reports the ratios; --compare-sglang starts SGLang's own server on the same model for that."""

from __future__ import annotations

import argparse
import importlib
import platform
import shlex
import signal
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from bench.config import Config
from bench.plots import plot
from bench.report import markdown, write
from bench.run import Run
from bench.target import from_url, started

SCENARIOS = (
    "latency",
    "phases",
    "prefix",
    "constraints",
    "overhead",
    "clients",
    "gateway",
    "interference",
    "prefill",
    "decode",
    "session",
)


def main(argv: list[str] | None = None) -> int:
    # SIGTERM (a CI job's timeout, `kill`) unwinds like Ctrl-C, so every server started is stopped.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return _run(argv)
    except KeyboardInterrupt:
        print("interrupted: the servers this run started are stopped", file=sys.stderr)
        return 130


def _terminated(signum: int, frame: object) -> None:
    del signum, frame
    raise KeyboardInterrupt


def _run(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[1])
    parser.add_argument("scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default all)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder")
    parser.add_argument("--quick", action="store_true", help="every scenario, reduced: < 3 min")
    parser.add_argument("--base-url", help="measure the server at this URL (…/v1/infer)")
    parser.add_argument("--compare-url", help="another server's OpenAI base URL, side by side")
    parser.add_argument(
        "--compare-sglang",
        action="store_true",
        help="start SGLang's own HTTP server on the same model and compare against it",
    )
    parser.add_argument(
        "--server-args",
        default="",
        help='flags for the servers the bench starts, e.g. "--model /models/m --device cuda"',
    )
    args = parser.parse_args(argv)
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}: choose from {', '.join(SCENARIOS)}")
    if args.compare_url and args.compare_sglang:
        parser.error("--compare-url or --compare-sglang, not both")
    server_args = shlex.split(args.server_args)
    folder = args.out / time.strftime("%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    started_at = time.monotonic()
    with ExitStack() as stack:
        if args.base_url:
            ours = from_url("this server", args.base_url)
        else:
            log = folder / "server.log"
            ours = stack.enter_context(started("this server", log, *server_args))
        compare = from_url("compared", args.compare_url) if args.compare_url else None
        if args.compare_sglang:
            log = folder / "sglang-server.log"
            # Its usage says how much of each prompt its cache served, as ours does.
            sglang = (*server_args, "--", "--enable-cache-report")
            compare = stack.enter_context(started("SGLang", log, *sglang, command="sglang-server"))
        run = Run(
            Config.make(args.quick),
            folder,
            ours,
            compare,
            local=not args.base_url,
            server_args=tuple(server_args),
        )
        rows, notes = [], {}
        for name in args.scenarios or SCENARIOS:
            print(f"running {name} ({time.monotonic() - started_at:.0f} s)", file=sys.stderr)
            scenario = importlib.import_module(f"bench.scenarios.{name}")
            rows += scenario.run(run)
            notes[scenario.NAME] = scenario.NOTE
            notes.update(getattr(scenario, "NOTES", {}))  # a scenario's other tables
    meta = {
        "quick": args.quick,
        "target": ours.openai_base,
        "model": ours.model,
        "compared": compare.openai_base if compare else None,
        "machine": platform.platform(),
        "seconds": round(time.monotonic() - started_at, 1),
    }
    table = write(rows, folder, meta, notes)
    plot(rows, folder / "results.png")
    print(markdown(rows, notes))
    print(f"written to {table.parent} in {meta['seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

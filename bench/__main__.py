"""`python -m bench [SCENARIO ...] [--out DIR] [--quick] [--base-url URL]`: runs the scenarios
against a server it starts (or the one at --base-url) and writes results.md and results.json."""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
from pathlib import Path

from bench.config import Config
from bench.report import markdown, write
from bench.target import target

SCENARIOS = ("constraints",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "scenarios", nargs="*", help=f"some of: {', '.join(SCENARIOS)} (default all)"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder")
    parser.add_argument("--quick", action="store_true", help="fewer samples per case")
    parser.add_argument("--base-url", help="measure the server at this URL instead of starting one")
    args = parser.parse_args(argv)
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}: choose from {', '.join(SCENARIOS)}")
    config = Config.make(args.quick)
    run = args.out / time.strftime("%Y%m%d-%H%M%S")
    run.mkdir(parents=True, exist_ok=True)
    rows = []
    with target(args.base_url, run / "server.log") as server:
        for name in args.scenarios or SCENARIOS:
            print(f"running {name}", file=sys.stderr)
            module = importlib.import_module(f"bench.scenarios.{name}")
            rows += module.run(server, config)
    meta = {
        "quick": args.quick,
        "target": server.origin,
        "model": server.model,
        "machine": platform.platform(),
    }
    table = write(rows, run, meta)
    print(markdown(rows))
    print(f"written to {table.parent}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

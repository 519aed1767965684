"""python -m bench [SCENARIO ...] [--out DIR] [--record] [--quick] [--base-url URL]
                [--compare-url URL] [--compare-sglang] [--server-args FLAGS]

Runs the scenarios (all by default) against a server it starts (the embedded model on this
machine, or what --server-args name), or the one at --base-url, and writes results.md,
results.json and results.png to a new folder under --out, headed by the date, the commit and
this machine (its CPU, cores, and the GEMM rate and memory bandwidth measured at the start).
--record also writes them to docs/bench/, the record the documentation quotes: a full run of
every scenario on this machine. --compare-url runs the latency sweep against another server too
(its OpenAI base URL, e.g. SGLang's own at http://host:30000/v1) and reports the ratios;
--compare-sglang starts SGLang's own server on the same model for that."""

from __future__ import annotations

import argparse
import importlib
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

from bench import machine
from bench.config import Config
from bench.plots import plot
from bench.report import markdown, title, write
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
    "startup",
)
REPOSITORY = Path(__file__).resolve().parent.parent
RECORD = REPOSITORY / "docs" / "bench"  # what the documentation's figures come from
RECORDED = ("results.md", "results.json", "results.png")


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
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="runs' folders")
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"also write the results to {RECORD.relative_to(REPOSITORY)}/, the docs' record",
    )
    parser.add_argument("--quick", action="store_true", help="every scenario, reduced")
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
    if args.record and (args.quick or args.scenarios or args.base_url or args.compare_url):
        # The record describes one machine: every scenario, full size, on servers started here.
        parser.error("--record is a full run of every scenario on this machine: without --quick, "
                     "scenarios, --base-url or --compare-url")  # fmt: skip
    server_args = shlex.split(args.server_args)
    folder = args.out / time.strftime("%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    started_at = time.monotonic()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    commit, dirty = _commit()
    # Before any server starts, so that nothing else runs on the cores it measures.
    measured = machine.measure()
    print(f"this machine: {measured.describe()}; {measured.rates()}", file=sys.stderr)
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
            machine=measured,
        )
        rows, notes = [], {}
        for name in args.scenarios or SCENARIOS:
            print(f"running {name} ({time.monotonic() - started_at:.0f} s)", file=sys.stderr)
            scenario = importlib.import_module(f"bench.scenarios.{name}")
            rows += scenario.run(run)
            notes[scenario.NAME] = scenario.NOTE
            notes.update(getattr(scenario, "NOTES", {}))  # a scenario's other tables
    meta = {
        "command": shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
        "date": date,
        "commit": commit,
        "dirty": dirty,
        "machine": asdict(measured),
        "platform": platform.platform(),
        "quick": args.quick,
        "local": not args.base_url,
        "target": ours.openai_base,
        "model": ours.model,
        "compared": compare.openai_base if compare else None,
        "seconds": round(time.monotonic() - started_at, 1),
    }
    table = write(rows, folder, meta, notes)
    plot(rows, folder / "results.png", title(meta))
    print(markdown(rows, notes))
    print(f"written to {table.parent} in {meta['seconds']} s", file=sys.stderr)
    if args.record:
        RECORD.mkdir(parents=True, exist_ok=True)
        for name in RECORDED:  # all three from this run, none left from an earlier one
            (RECORD / name).unlink(missing_ok=True)
            if (folder / name).exists():
                shutil.copyfile(folder / name, RECORD / name)
        print(f"recorded in {RECORD}", file=sys.stderr)
    return 0


def _commit() -> tuple[str, bool]:
    """The commit measured, and whether tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True, check=True
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False  # not a git checkout (an image's copy)
    return head, bool(changes)


if __name__ == "__main__":
    sys.exit(main())

"""The server's own cost. Through HTTP against the model-free replay engine: per request (one
event), per streamed event (256 against one), and the most events per second one server process
streams to many clients. And the same prompts through HTTP against the engine called in-process
(when this run started the server on this machine)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

from bench import prompts
from bench.client import Load, load
from bench.report import Row
from bench.run import Run
from bench.stats import percentile
from bench.target import Target, started

NAME = "front-end overhead"
NOTE = (
    "Replay: this server with --engine replay (no model), loopback, client in another process "
    "on the same cores. In-process: the sglang engine called directly, same prompts and renderer."
)
LONG = 256  # events in a long replayed answer


def _replayed(target: Target, protocol: str, count: int, max_tokens: int, concurrency: int) -> Load:
    bodies = [
        prompts.body(protocol, target.model, text, max_tokens) for text in prompts.questions(count)
    ]
    return asyncio.run(load(target, protocol, bodies, concurrency))


def _replay(run: Run) -> list[Row]:
    rows = []
    count = run.config.repeats * 4
    streams = 8 if run.config.quick else 32
    with started("replay", run.folder / "replay-server.log", "--engine", "replay") as target:
        for protocol in ("messages", "chat", "responses"):
            short = _replayed(target, protocol, count, 1, 1)
            long = _replayed(target, protocol, count, LONG, 1)
            short_ms = percentile([s.e2e_ms for s in short.samples], 50) or 0.0
            long_ms = percentile([s.e2e_ms for s in long.samples], 50) or 0.0
            many = _replayed(target, protocol, streams, LONG, streams)
            rows.append(
                Row(
                    NAME,
                    f"replay {protocol}",
                    {
                        "per request ms (1 event)": short_ms,
                        f"{LONG} events ms": long_ms,
                        "per event us": (long_ms - short_ms) / (LONG - 1) * 1000,
                        f"events/s ({streams} streams)": many.events_per_s,
                    },
                )
            )
    return rows


def _in_process(run: Run) -> list[Row]:
    count, max_tokens = run.config.repeats, 32
    bodies = [
        prompts.body("chat", run.ours.model, text, max_tokens) for text in prompts.questions(count)
    ]
    http = asyncio.run(load(run.ours, "chat", bodies, 1)).samples
    command = [sys.executable, "-m", "bench.inprocess", str(count), str(max_tokens)]
    with (run.folder / "inprocess.log").open("wb") as log:
        output = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, check=True).stdout
    engine: list[dict[str, Any]] = json.loads(output)
    http_ttft = percentile([s.ttft_ms for s in http], 50) or 0.0
    http_e2e = percentile([s.e2e_ms for s in http], 50) or 0.0
    engine_ttft = percentile([s["ttft_ms"] for s in engine], 50) or 0.0
    engine_e2e = percentile([s["e2e_ms"] for s in engine], 50) or 0.0
    difference = {"TTFT p50 ms": http_ttft - engine_ttft, "e2e p50 ms": http_e2e - engine_e2e}
    return [
        Row(NAME, "chat through HTTP", {"TTFT p50 ms": http_ttft, "e2e p50 ms": http_e2e}),
        Row(NAME, "engine in-process", {"TTFT p50 ms": engine_ttft, "e2e p50 ms": engine_e2e}),
        Row(NAME, "HTTP minus in-process", difference),
    ]


def run(run: Run) -> list[Row]:
    # The in-process comparison starts an engine of its own: left out of a quick run.
    return _replay(run) + (_in_process(run) if run.local and not run.config.quick else [])

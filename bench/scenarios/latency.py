"""Time to first token, inter-token latency, end to end and throughput at p50/p90/p99, for each
concurrency level, each protocol (Messages, Chat Completions, Responses), streaming, over
HTTP/1.1 and cleartext HTTP/2; and, with --compare-url, the same workload on the other server
with the ratios."""

from __future__ import annotations

import asyncio
from typing import Any

from bench import prompts
from bench.client import Load, load
from bench.report import Row
from bench.run import Run
from bench.stats import latency
from bench.target import Target

NAME = "latency"
NOTE = (
    "Greedy, streamed, answers of at most max_tokens; tok/s total is output tokens per wall second."
)


def _measure(run: Run, target: Target, protocol: str, http2: bool, concurrency: int) -> Load:
    count = max(concurrency, run.config.min_requests)
    bodies = [
        prompts.body(protocol, target.model, text, run.config.max_tokens)
        for text in prompts.questions(count)
    ]
    return asyncio.run(load(target, protocol, bodies, concurrency, http2))


def run(run: Run) -> list[Row]:
    rows = []
    targets = [run.ours] + ([run.compare] if run.compare else [])
    results: dict[tuple[str, str, bool, int], dict[str, Any]] = {}
    for target in targets:
        # The Responses API is measured on this server only (the comparison is on the other two).
        for protocol in ("messages", "chat", "responses") if target.ours else ("messages", "chat"):
            _measure(run, target, protocol, False, 2)  # warm up: first requests run slower
            # Another server may not speak cleartext HTTP/2: it is measured on HTTP/1.1.
            for http2 in (False, True) if target.ours else (False,):
                for concurrency in run.config.concurrency:
                    measured = _measure(run, target, protocol, http2, concurrency)
                    values = {
                        "n": len(measured.samples),
                        **latency(measured.samples),
                        "tok/s total": measured.tokens_per_s,
                    }
                    results[(target.name, protocol, http2, concurrency)] = values
                    case = f"{target.name} {protocol} {'h2' if http2 else 'h1'} c={concurrency}"
                    rows.append(Row(NAME, case, values))
    if run.compare:
        rows += _ratios(run, results)
    return rows


def _ratios(run: Run, results: dict[tuple[str, str, bool, int], dict[str, Any]]) -> list[Row]:
    """The other server's figure over ours: above 1 means ours is faster (lower latency) or,
    for throughput, below 1 means ours moves more tokens."""
    assert run.compare is not None
    rows = []
    for protocol in ("messages", "chat"):
        for concurrency in run.config.concurrency:
            mine = results[(run.ours.name, protocol, False, concurrency)]
            theirs = results[(run.compare.name, protocol, False, concurrency)]
            values = {}
            for key in ("TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "e2e p50 ms", "tok/s total"):
                if mine.get(key) and theirs.get(key) is not None:
                    values[f"{key} ratio"] = theirs[key] / mine[key]
            rows.append(Row("comparison", f"{protocol} h1 c={concurrency}", values))
    return rows

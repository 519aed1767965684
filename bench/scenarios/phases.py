"""Where a request's time goes, by the server's own account: its Server-Timing phases and
request log entry (queue when the engine reports it, template, grammar, time to first token,
model, total) for requests one at a time, both protocols, streamed and not."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from bench import prompts
from bench.client import load
from bench.report import Row
from bench.run import Run
from bench.stats import percentile

NAME = "phases"
NOTE = (
    "Server-side milliseconds from the request head (request log entries). ttft includes "
    "template and grammar; model runs from submission to the engine to the last token."
)
PHASES = ("queue", "template", "grammar", "ttft", "model", "total")


def _entries(run: Run, protocol: str) -> list[dict[str, float]]:
    target = run.ours
    bodies = [
        prompts.body(protocol, target.model, text, run.config.max_tokens)
        for text in prompts.questions(run.config.repeats)
    ]
    measured = asyncio.run(load(target, protocol, bodies, concurrency=1))
    with httpx.Client(base_url=target.origin, timeout=30) as http:
        return [
            http.get(f"/v1/requests/{sample.request_id}").json()["timing"]
            for sample in measured.samples
        ]


def run(run: Run) -> list[Row]:
    if not run.ours.ours:
        return []
    rows = []
    for protocol in ("messages", "chat"):
        entries = _entries(run, protocol)
        values: dict[str, Any] = {"n": len(entries)}
        for phase in PHASES:
            durations = [entry[phase] for entry in entries if phase in entry]
            if durations:
                values[f"{phase} p50 ms"] = percentile(durations, 50)
                values[f"{phase} p99 ms"] = percentile(durations, 99)
        rows.append(Row(NAME, f"{protocol} streamed, one at a time", values))
    return rows

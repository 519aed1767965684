"""Prefix caching: time to first token with a long shared system prompt (about 1,500 tokens),
cold (a prefix the runtime has never seen) against warm (the same prefix, a new question)."""

from __future__ import annotations

import asyncio

from bench import prompts
from bench.client import Sample, client, stream
from bench.report import Row
from bench.run import Run
from bench.stats import percentile

NAME = "prefix cache"
NOTE = "Streamed, max_tokens 2; the speed-up is cold p50 over warm p50."
RULES = 110  # rules in the system prompt: about 1,500 tokens with the template


def _system(variant: int) -> str:
    rules = " ".join(f"Rule {k}: answer precisely and cite sources." for k in range(RULES))
    return f"Policy {variant}. {rules}"


async def _measure(run: Run) -> tuple[list[Sample], list[Sample]]:
    target = run.ours
    cold: list[Sample] = []
    warm: list[Sample] = []
    async with client() as http:
        for variant in range(run.config.repeats):
            system = _system(variant)
            for samples, question in ((cold, "First question?"), (warm, "Second question?")):
                body = prompts.body("chat", target.model, question, 2)
                body["messages"] = [{"role": "system", "content": system}, *body["messages"]]
                samples.append(await stream(http, target, "chat", body))
    return cold, warm


def run(run: Run) -> list[Row]:
    cold, warm = asyncio.run(_measure(run))
    rows = []
    for case, samples in (("cold prefix", cold), ("warm prefix", warm)):
        values = {
            "n": len(samples),
            "TTFT p50 ms": percentile([s.ttft_ms for s in samples], 50),
            "TTFT p99 ms": percentile([s.ttft_ms for s in samples], 99),
            "server ttft p50 ms": percentile([s.phases.get("ttft", 0.0) for s in samples], 50),
        }
        rows.append(Row(NAME, case, values))
    cold_p50, warm_p50 = rows[0].values["TTFT p50 ms"], rows[1].values["TTFT p50 ms"]
    if cold_p50 and warm_p50:
        rows.append(Row(NAME, "speed-up", {"TTFT p50 ms": cold_p50 / warm_p50}))
    return rows

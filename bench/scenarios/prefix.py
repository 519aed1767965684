"""Prefix caching: time to first token with a long shared system prompt (about 1,500 tokens),
cold (a prefix the runtime has never seen) against warm (the same prefix, a new question). With
--compare-url, the other server too, on prefixes of its own (a front behind sglang-router against
one on a worker directly shares the workers' caches)."""

from __future__ import annotations

import asyncio

from bench import prompts
from bench.client import Sample, client, stream
from bench.report import Row
from bench.run import Run
from bench.stats import percentile
from bench.target import Target

NAME = "prefix cache"
NOTE = "Streamed, max_tokens 2; the speed-up is cold p50 over warm p50."
RULES = 110  # rules in the system prompt: about 1,500 tokens with the template


def _system(run: Run, variant: int) -> str:
    """Named for the run (its folder), so that a prefix is cold on servers measured before."""
    rules = " ".join(f"Rule {k}: answer precisely and cite sources." for k in range(RULES))
    return f"Policy {variant} of run {run.folder.name}. {rules}"


async def _measure(run: Run, target: Target, offset: int) -> tuple[list[Sample], list[Sample]]:
    cold: list[Sample] = []
    warm: list[Sample] = []
    async with client() as http:
        for variant in range(offset, offset + run.config.repeats):
            system = _system(run, variant)
            for samples, question in ((cold, "First question?"), (warm, "Second question?")):
                body = prompts.body("chat", target.model, question, 2)
                body["messages"] = [{"role": "system", "content": system}, *body["messages"]]
                samples.append(await stream(http, target, "chat", body))
    return cold, warm


def run(run: Run) -> list[Row]:
    targets = [run.ours] + ([run.compare] if run.compare else [])
    rows = []
    for index, target in enumerate(targets):
        cold, warm = asyncio.run(_measure(run, target, index * run.config.repeats))
        suffix = f" ({target.name})" if run.compare else ""
        found = []
        for case, samples in (("cold prefix", cold), ("warm prefix", warm)):
            values = {
                "n": len(samples),
                "TTFT p50 ms": percentile([s.ttft_ms for s in samples], 50),
                "TTFT p99 ms": percentile([s.ttft_ms for s in samples], 99),
                "server ttft p50 ms": percentile([s.phases.get("ttft", 0.0) for s in samples], 50),
            }
            found.append(Row(NAME, case + suffix, values))
        cold_p50, warm_p50 = found[0].values["TTFT p50 ms"], found[1].values["TTFT p50 ms"]
        if cold_p50 and warm_p50:
            found.append(Row(NAME, "speed-up" + suffix, {"TTFT p50 ms": cold_p50 / warm_p50}))
        rows += found
    return rows

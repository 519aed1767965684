"""The gateway hop: the same streamed chat completions sent to the measured server direct, and
through a second node (the replay engine, serving another model) whose `--gateway-url` is the
measured server, with `"route": "gateway"`. What the hop adds to the time to first token and to
the whole answer, at p50 and p99."""

from __future__ import annotations

import asyncio

from bench import prompts
from bench.client import Load, load
from bench.report import Row
from bench.run import Run
from bench.stats import percentile
from bench.target import Target, started

NAME = "gateway hop"
NOTE = (
    "Direct: the measured server. Through the gateway: a replay-engine node on the same machine "
    "forwarding to it (route gateway); client, node and upstream share the cores."
)


def _measure(run: Run, target: Target, model: str, concurrency: int, gateway: bool) -> Load:
    extra = {"route": "gateway"} if gateway else {}
    count = max(concurrency, run.config.min_requests) * 2
    bodies = [
        prompts.body("chat", model, text, run.config.max_tokens, **extra)
        for text in prompts.questions(count)
    ]
    return asyncio.run(load(target, "chat", bodies, concurrency))


def run(run: Run) -> list[Row]:
    rows = []
    upstream = run.ours
    args = ("--engine", "replay", "--served-model-name", "bench-front")
    log = run.folder / "gateway-front.log"
    with started("front", log, *args, "--gateway-url", upstream.openai_base) as front:
        _measure(run, upstream, upstream.model, 2, False)  # warm up both paths
        _measure(run, front, upstream.model, 2, True)
        for concurrency in run.config.concurrency[:2]:
            direct = _measure(run, upstream, upstream.model, concurrency, False).samples
            hop = _measure(run, front, upstream.model, concurrency, True).samples
            values = {}
            for q in (50, 99):
                for key, pick in (("TTFT", "ttft_ms"), ("e2e", "e2e_ms")):
                    mine = percentile([getattr(s, pick) for s in direct], q) or 0.0
                    theirs = percentile([getattr(s, pick) for s in hop], q) or 0.0
                    values[f"{key} p{q} direct ms"] = mine
                    values[f"{key} p{q} gateway ms"] = theirs
                    values[f"{key} p{q} added ms"] = theirs - mine
            rows.append(Row(NAME, f"chat h1 c={concurrency}", values))
    return rows

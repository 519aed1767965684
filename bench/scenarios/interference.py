"""What one agent-sized prompt does to everyone else: a stream is decoding, a long prompt (about
7,000 tokens, cold) arrives, and a second later a one-line question. Measured: the running
stream's longest gap between tokens while the long prompt prefills, the question's time to first
token, and the long prompt's own. Then the same prompt is sent and its client leaves once its
prefill is under way: how long the runtime stays busy with it after the client has gone. With
--compare-url or --compare-sglang, SGLang's own server too."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bench import prompts
from bench.client import client, stream
from bench.report import Row
from bench.run import Run
from bench.stats import percentile
from bench.target import Target

NAME = "interference"
NOTE = (
    "A stream decoding (greedy), then a cold prompt of about 7,000 tokens (2,000 with --quick), "
    "then after 1 s a one-line question (max_tokens 4): the stream's longest gap while the long "
    "prompt prefills, the question's TTFT, the long prompt's TTFT. 'busy after leaving': the "
    "long prompt's client leaves 2 s into its prefill; seconds until a new one-line question "
    "gets its first token."
)
LONG_TOKENS, QUICK_LONG_TOKENS = 7000, 2000
QUESTION_DELAY_S = 1.0
LEAVE_AFTER_S = 2.0


@dataclass
class Timeline:
    """When each token event of a stream arrived (perf_counter seconds)."""

    arrivals: list[float] = field(default_factory=list)
    flowing: asyncio.Event = field(default_factory=asyncio.Event)  # a few tokens came
    ended: float | None = None  # the stream ended by itself

    def arrived(self) -> None:
        self.arrivals.append(time.perf_counter())
        if len(self.arrivals) >= 5:
            self.flowing.set()

    def gaps(self, start: float, end: float) -> list[float]:
        """The waits between two tokens that overlap [start, end]."""
        return [b - a for a, b in itertools.pairwise(self.arrivals) if b >= start and a <= end]


def long_text(tokens: int, tag: str) -> str:
    """About `tokens` tokens of varied notes, opening with `tag` so that no cache holds it. Each
    note is counted as SmolLM2's tokenizer splits it: its words, and its number a digit a token."""
    notes: list[str] = []
    counted = 0
    while counted < tokens:
        number = len(notes)
        topic = prompts.TOPICS[number % len(prompts.TOPICS)]
        notes.append(f"{topic} number {number} is noted;")
        counted += 5 + len(topic.split()) + len(str(number))
    return f"{tag}. Read these notes, then answer in one word. {' '.join(notes)}"


async def _decoding(http: httpx.AsyncClient, target: Target, timeline: Timeline) -> None:
    """A stream that outlasts the measurement: greedy decoding goes on counting (stopped by the
    caller)."""
    body = prompts.body("chat", target.model, "Count from 1 to 3000, with commas.", 4000)
    body["messages"].append({"role": "assistant", "content": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"})
    async with http.stream("POST", target.url("chat"), json={**body, "stream": True}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"content"' in line:
                data = orjson.loads(line[6:])
                choices = data.get("choices") or []
                if choices and choices[0].get("delta", {}).get("content"):
                    timeline.arrived()
    timeline.ended = time.perf_counter()


async def _interference(target: Target, text: str) -> dict[str, Any]:
    timeline = Timeline()
    async with client() as http:
        decoding = asyncio.create_task(_decoding(http, target, timeline))
        await timeline.flowing.wait()
        sent = time.perf_counter()
        long = asyncio.create_task(
            stream(http, target, "chat", prompts.body("chat", target.model, text, 1))
        )
        await asyncio.sleep(QUESTION_DELAY_S)
        question = await stream(http, target, "chat", prompts.body("chat", target.model, "Hi", 4))
        long_sample = await long
        decoding.cancel()
        await asyncio.gather(decoding, return_exceptions=True)
    ended = sent + long_sample.ttft_ms / 1000
    covered = ended if timeline.ended is None else min(ended, timeline.ended)
    gaps = timeline.gaps(sent, covered)
    return {
        # below 100: the stream ended by itself first, and its gaps cover only that part
        "stream covered %": 100 * (covered - sent) / (ended - sent),
        "stream longest gap s": max(gaps, default=None),
        "stream gap p50 s": percentile(gaps, 50),
        "question TTFT s": question.ttft_ms / 1000,
        "long prompt tokens": long_sample.prompt_tokens,
        "long prompt TTFT s": long_sample.ttft_ms / 1000,
        "long prompt tok/s": long_sample.prompt_tokens / (long_sample.ttft_ms / 1000),
    }


async def _busy_after_leaving(target: Target, text: str) -> float:
    """Seconds from the client leaving mid-prefill to a new question's first token."""
    async with client() as http:
        body = prompts.body("chat", target.model, text, 1)
        left = asyncio.create_task(stream(http, target, "chat", body))
        await asyncio.sleep(LEAVE_AFTER_S)
        left.cancel()
        await asyncio.gather(left, return_exceptions=True)
        gone = time.perf_counter()
        question = await stream(http, target, "chat", prompts.body("chat", target.model, "Hi", 4))
        return time.perf_counter() - gone - (question.e2e_ms - question.ttft_ms) / 1000


def run(run: Run) -> list[Row]:
    tokens = QUICK_LONG_TOKENS if run.config.quick else LONG_TOKENS
    rows = []
    for index, target in enumerate([run.ours] + ([run.compare] if run.compare else [])):
        tag = f"Run {run.folder.name}, server {index}"
        values = asyncio.run(_interference(target, long_text(tokens, tag + " first")))
        values["busy after leaving s"] = asyncio.run(
            _busy_after_leaving(target, long_text(tokens, tag + " second"))
        )
        rows.append(Row(NAME, f"{target.name}, {tokens}-token prompt", values))
    return rows

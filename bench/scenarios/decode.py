"""Decode speed against context length and concurrency: tokens per second after the first, per
stream and in all, of greedy streams that go on repeating a word (so every one runs to
max_tokens), after a context of each length that the prefix cache already holds (measured apart
from its prefill), one, 4 and 16 streams at once; one stream with ten tools under `auto` (the
tool-call grammar's per-token cost); beside llama.cpp on the same GGUF (one stream,
`bench/llamacpp/decode.mjs`) and, with --compare-url or --compare-sglang, SGLang's own server."""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from bench import prompts
from bench.client import Sample, client, stream
from bench.report import Row
from bench.run import Run
from bench.scenarios.interference import long_text
from bench.scenarios.prefill import LLAMACPP
from bench.target import Target, paused

NAME = "decode"
NOTE = (
    "Greedy, streamed, chat; the context (its length in the case) is in the prefix cache before "
    "the streams start, so what is timed is decode: tokens after the first over the time after "
    "the first. 'total' is every stream's tokens over the span from the first stream's first "
    "token to the last stream's end. llama.cpp: one stream on every core, its context evaluated "
    "first, its own tokenization."
)
CONTEXTS, QUICK_CONTEXTS = (0, 1000, 2000, 4000, 7000), (0, 1000)
CONCURRENCY, QUICK_CONCURRENCY = (1, 4, 16), (1, 4)
TOKENS, QUICK_TOKENS = 96, 32
TOOLS = 10
ASK = "Write the word dog two hundred times."
STARTED = "dog dog dog dog dog dog"  # the answer's start: greedy decoding goes on repeating it
TIMEOUT_S = 3600


def tools() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"lookup_{index}",
                "description": f"Looks up record {index} of the archive.",
                "parameters": {
                    "type": "object",
                    "properties": {"key": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["key"],
                },
            },
        }
        for index in range(TOOLS)
    ]


def body(target: Target, context: str, stream_index: int, tokens: int) -> dict[str, Any]:
    text = f"{context}\n\nAnswer {stream_index}. {ASK}" if context else f"{stream_index}. {ASK}"
    chat = prompts.body("chat", target.model, text, tokens)
    chat["messages"].append({"role": "assistant", "content": STARTED})
    return chat


async def _streams(target: Target, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    async with client(connections=len(bodies), timeout=TIMEOUT_S) as http:

        async def one(request: dict[str, Any]) -> tuple[float, Sample]:
            return time.perf_counter(), await stream(http, target, "chat", request)

        timed = await asyncio.gather(*(one(request) for request in bodies))
    rates = [rate for _, sample in timed if (rate := sample.tokens_per_s) is not None]
    first = min(start + sample.ttft_ms / 1000 for start, sample in timed)
    last = max(start + sample.e2e_ms / 1000 for start, sample in timed)
    decoded = sum(max(sample.output_tokens - 1, 0) for _, sample in timed)
    return {
        "prompt tokens": statistics.median(sample.prompt_tokens for _, sample in timed),
        "tok/s per stream": statistics.median(rates) if rates else None,
        "tok/s total": decoded / (last - first) if last > first else None,
    }


async def _measure(target: Target, run: Run) -> list[Row]:
    quick = run.config.quick
    tokens = QUICK_TOKENS if quick else TOKENS
    rows = []
    for length in QUICK_CONTEXTS if quick else CONTEXTS:
        context = long_text(length, f"Decode run {run.folder.name}, {length}") if length else ""
        # The context prefilled once, so that every stream below finds it in the prefix cache.
        await _streams(target, [body(target, context, 0, 1)])
        for concurrency in QUICK_CONCURRENCY if quick else CONCURRENCY:
            bodies = [body(target, context, index, tokens) for index in range(concurrency)]
            found = await _streams(target, bodies)
            rows.append(Row(NAME, f"{target.name}, {length} tokens, c={concurrency}", found))
        with_tools = {**body(target, context, 0, tokens), "tools": tools(), "tool_choice": "auto"}
        try:
            found = await _streams(target, [with_tools])
        except RuntimeError as error:  # a server that takes no tools here: said, not measured
            print(f"decode with tools on {target.name}: {error}", file=sys.stderr)
            continue
        rows.append(Row(NAME, f"{target.name}, {length} tokens, {TOOLS} tools auto", found))
    return rows


def _llamacpp(contexts: tuple[int, ...], tokens: int) -> list[Row]:
    if not (LLAMACPP / "node_modules").is_dir():
        print("llama.cpp: not installed (make bench-clients); left out", file=sys.stderr)
        return []
    from server.models.embedded import gguf_path

    command = ["node", "decode.mjs", str(gguf_path()), ",".join(map(str, contexts)), str(tokens)]
    done = subprocess.run(command, cwd=LLAMACPP, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        print(f"llama.cpp failed: {done.stderr[-2000:]}", file=sys.stderr)
        return []
    rows = []
    for entry in json.loads(done.stdout.strip().splitlines()[-1])["decode"]:
        rate = entry["tok_s"]
        values = {"prompt tokens": entry["context"], "tok/s per stream": rate, "tok/s total": rate}
        rows.append(Row(NAME, f"llama.cpp, {entry['context']} tokens, c=1", values))
    return rows


def run(run: Run) -> list[Row]:
    """Each server, and llama.cpp, measured with the others this run started paused."""
    rows = []
    targets = [run.ours] + ([run.compare] if run.compare else [])
    for target in targets:
        with paused([other for other in targets if other is not target]):
            rows += asyncio.run(_measure(target, run))
    quick = run.config.quick
    with paused(targets):
        rows += _llamacpp(QUICK_CONTEXTS if quick else CONTEXTS, QUICK_TOKENS if quick else TOKENS)
    return rows

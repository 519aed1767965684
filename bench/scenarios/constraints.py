"""Constrained decoding: the cost of a tool-call grammar or a JSON Schema answer against free
text. Cold is a schema the runtime has not compiled yet (a fresh one per request); warm repeats
one, which SGLang's xgrammar backend has cached. Then each model format's own grammar compile
and reader, without a model (bench/formats.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from bench import formats, prompts
from bench.client import Sample, client, stream
from bench.report import Row
from bench.run import Run
from bench.stats import percentile

NAME = "constrained decoding"
NOTE = (
    "Chat, streamed, greedy, max_tokens 48 (24 with --quick: a call's header is written by then)."
    " The first event of a tool call is its start, which "
    "needs the call's header written: compare server ttft for the grammar's own cost."
)
NOTES = {formats.NAME: formats.NOTE}
MAX_TOKENS, QUICK_MAX_TOKENS = 48, 24
QUESTION = "What is the weather in Eugene, Oregon? Use the tool."
CASES = (
    "free text",
    "tool call, grammar warm",
    "tool call, grammar cold",
    "JSON schema, grammar warm",
    "JSON schema, grammar cold",
)


def _schema(fresh: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    }
    if fresh:  # a property no earlier request had: the grammar must be compiled anew
        properties[f"note_{uuid.uuid4().hex[:8]}"] = {"type": "integer"}
    return {"type": "object", "properties": properties, "required": ["city", "unit"]}


def _body(model: str, case: str, max_tokens: int) -> dict[str, Any]:
    body = prompts.body("chat", model, QUESTION, max_tokens)
    fresh = case.endswith("cold")
    if case.startswith("tool call"):
        tool = {
            "type": "function",
            "function": {"name": "get_weather", "parameters": _schema(fresh)},
        }
        body.update(tools=[tool], tool_choice="required", parallel_tool_calls=False)
    elif case.startswith("JSON schema"):
        spec = {"name": "weather", "schema": _schema(fresh)}
        body["response_format"] = {"type": "json_schema", "json_schema": spec}
    return body


async def _measure(run: Run) -> dict[str, list[Sample]]:
    target = run.ours
    results: dict[str, list[Sample]] = {}
    size = QUICK_MAX_TOKENS if run.config.quick else MAX_TOKENS
    async with client() as http:
        await stream(http, target, "chat", _body(target.model, "tool call, grammar warm", size))
        await stream(http, target, "chat", _body(target.model, "JSON schema, grammar warm", size))
        for case in CASES:
            results[case] = [
                await stream(http, target, "chat", _body(target.model, case, size))
                for _ in range(run.config.repeats)
            ]
    return results


def run(run: Run) -> list[Row]:
    rows = []
    for case, samples in asyncio.run(_measure(run)).items():
        rates = [s.tokens_per_s for s in samples if s.tokens_per_s]
        values = {
            "n": len(samples),
            "TTFT p50 ms": percentile([s.ttft_ms for s in samples], 50),
            "server ttft p50 ms": percentile([s.phases.get("ttft", 0.0) for s in samples], 50),
            "tok/s p50": percentile(rates, 50),
            "output tokens p50": percentile([float(s.output_tokens) for s in samples], 50),
        }
        rows.append(Row(NAME, case, values))
    return rows + formats.rows()

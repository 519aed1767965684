"""Constrained decoding: the cost of a tool-call grammar or a JSON Schema answer against free
text. Cold is a schema the runtime has not compiled yet (a fresh one per request); warm repeats
one, which SGLang's xgrammar backend has cached."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from bench.client import Sample, stream
from bench.config import Config
from bench.report import Row, median
from bench.target import Target

PROMPT = [{"role": "user", "content": "What is the weather in Eugene, Oregon? Use the tool."}]
MAX_TOKENS = 48


def _schema(fresh: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    }
    if fresh:  # a property no earlier request had: the grammar must be compiled anew
        properties[f"note_{uuid.uuid4().hex[:8]}"] = {"type": "integer"}
    return {"type": "object", "properties": properties, "required": ["city", "unit"]}


def _body(model: str, case: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "messages": PROMPT,
    }
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
    return {**body, "stream_options": {"include_usage": True}}


CASES = [
    "free text",
    "tool call, grammar warm",
    "tool call, grammar cold",
    "JSON schema, grammar warm",
    "JSON schema, grammar cold",
]


def run(target: Target, config: Config) -> list[Row]:
    rows = []
    with httpx.Client(base_url=target.origin, timeout=300) as client:
        stream(client, "chat", _body(target.model, "tool call, grammar warm"))  # compile once
        for case in CASES:
            samples = [
                stream(client, "chat", _body(target.model, case)) for _ in range(config.repeats)
            ]
            rows.append(Row("constrained decoding", case, _summary(samples)))
    return rows


def _summary(samples: list[Sample]) -> dict[str, Any]:
    rates = [s.tokens_per_s for s in samples if s.tokens_per_s]
    return {
        "n": len(samples),
        "TTFT p50 ms": median([s.ttft_ms for s in samples]),
        "server ttft p50 ms": median([s.server.get("ttft", 0.0) for s in samples]),
        "grammar build p50 ms": median([s.server.get("grammar", 0.0) for s in samples]),
        "tokens/s p50": median(rates),
        "output tokens p50": median([float(s.output_tokens) for s in samples]),
    }

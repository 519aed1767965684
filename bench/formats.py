"""Each model format's own costs, without a model: compiling the grammar of a required call for one
tool and for an agent's tool set (Claude Code's and opencode's recorded tools, 22), and reading an
answer's call token by token (the node's reader: SGLang's parsers and what it adds). Measured on
each family's published template (tests/families/), with the embedded model's vocabulary and the
family's own tokens."""

from __future__ import annotations

import gzip
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.report import Row
from server.canonical import Tool, ToolChoice, ToolChoiceKind

NAME = "model formats"
NOTE = (
    "Per family (its first published template): the xgrammar compile of a required call's "
    "grammar, cold (a compiler without cache), median of 3, for get_weather alone and for 22 "
    "agent tools; the reader's time per token of one Write call of 2,000 characters of content, "
    "fed token by token. `refused`: xgrammar does not compile those schemas in that format."
)
SESSIONS = Path(__file__).parent / "sessions"
WEATHER = Tool(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
     "required": ["city"]},
)  # fmt: skip
CONTENT = ("def answer(question: str) -> str:\n    return 'forty-two'  # <tag> \"quoted\"\n" * 40)[
    :2000
]


def agent_tools() -> tuple[Tool, ...]:
    """Claude Code's tools and opencode's, as the recorded sessions sent them."""
    found: dict[str, Tool] = {}
    for agent in ("claude-code", "opencode"):
        recorded = json.loads(gzip.decompress((SESSIONS / f"{agent}.json.gz").read_bytes()))
        for request in recorded["requests"]:
            for tool in request["body"].get("tools", []):
                function = tool.get("function", tool)
                schema = function.get("input_schema") or function.get("parameters") or {}
                name = function["name"]
                found.setdefault(name, Tool(name, function.get("description"), schema))
    found.setdefault("Write", Tool("Write", "Write a file.", _WRITE))
    return tuple(found.values())


_WRITE = {
    "type": "object",
    "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["file_path", "content"],
}


def _compile_ms(found: Any, tools: tuple[Tool, ...]) -> float | str | None:
    """Milliseconds, or what xgrammar refuses of these tools' schemas in this format."""
    from xgrammar import GrammarCompiler, TokenizerInfo

    grammar, _, _ = found.prepared(tools, ToolChoice(ToolChoiceKind.ANY))
    if grammar.constraint is None:
        return None
    info = TokenizerInfo.from_huggingface(found.tokenizer, vocab_size=len(found.tokenizer))
    times = []
    for _ in range(3):
        compiler = GrammarCompiler(info, cache_enabled=False)
        started = time.perf_counter()
        try:
            compiler.compile_structural_tag(grammar.constraint.value)
        except RuntimeError:
            return "refused"
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _reader_us_per_token(found: Any, tools: tuple[Tool, ...]) -> float | None:
    if not (found.entry.writes_calls and found.entry.sglang_reads):
        return None
    arguments = {"file_path": "/tmp/answer.py", "content": CONTENT}
    text = found.answer([("Write", arguments)], tools)
    _, reader, before = found.prepared(tools, ToolChoice(ToolChoiceKind.AUTO))
    text = before + text
    encoded = found.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    pieces = [text[start:end] for start, end in encoded.offsets if end > start]
    started = time.perf_counter()
    for piece in pieces:
        reader.feed(piece)
    reader.finish()
    return (time.perf_counter() - started) / len(pieces) * 1e6


def rows() -> list[Row]:
    from tests.families.formats import prepared
    from tests.families.published import published

    tools = agent_tools()
    seen: set[str] = set()
    out = []
    for index, entry in enumerate(published()):
        found = prepared(index)
        family = found.form.family.name
        if family in seen:
            continue
        seen.add(family)
        out.append(
            Row(
                NAME,
                family,
                {
                    "template": entry.model.split(" (")[0],
                    "compile 1 tool ms": _compile_ms(found, (WEATHER,)),
                    f"compile {len(tools)} tools ms": _compile_ms(found, tools),
                    "reader us/token": _reader_us_per_token(found, tools),
                },
            )
        )
    return out

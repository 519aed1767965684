"""Every published template (tests/families/templates/), checked without a model: the node
recognises its format as SGLang's detection (or the family's markers) names it, renders a tool
conversation through it, constrains a required or named call so that the call as the template
writes it is taken and text is not, and reads that call as SGLang's detector reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grammars import libraries
from server.canonical import (
    Event,
    GenerateRequest,
    Message,
    Text,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolChoice,
    ToolChoiceKind,
    ToolResult,
)
from tests.families.formats import Format, prepared, sglang_reads
from tests.families.published import published
from tests.families.table import table
from tests.unit.grammar_check import accepts

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
TOOLS = (Tool("get_weather", "The weather.", WEATHER), Tool("get_time", "The time.", WEATHER))
CALL = ("get_weather", {"city": "Paris", "days": 3})
ENTRIES = [pytest.param(index, id=entry.id) for index, entry in enumerate(published())]
# The templates that write calls as their format has them and SGLang reads them so; those it
# cannot read have the test of their own below.
WRITTEN = [
    pytest.param(index, id=entry.id)
    for index, entry in enumerate(published())
    if entry.writes_calls and entry.sglang_reads
]
UNREAD = [
    pytest.param(index, id=entry.id)
    for index, entry in enumerate(published())
    if entry.writes_calls and not entry.sglang_reads
]


@pytest.fixture(params=ENTRIES)
def found(request: pytest.FixtureRequest) -> Format:
    return prepared(request.param)


def test_the_format_is_the_one_sglang_reads_it_with(found: Format) -> None:
    parsers = libraries.tool_parsers()
    family = found.form.family
    assert family.tool_parser is not None, family
    assert parsers[family.tool_parser] is parsers[found.entry.format]


def test_a_tool_conversation_renders_through_the_template(found: Format) -> None:
    call = ToolCall("call00001", *(CALL[0], json.dumps(CALL[1])))
    messages = (
        Message("system", (Text("Be brief."),)),
        Message("user", (Text("Weather in Paris?"),)),
        Message("assistant", (call,)),
        Message("tool", (ToolResult("call00001", (Text("sunny and 21C"),)),)),
    )
    text = found.renderer.render(GenerateRequest("m", messages, tools=TOOLS)).text
    for shown in ("Weather in Paris?", "sunny and 21C", "get_weather", "Paris"):
        assert shown in text, shown


@pytest.mark.parametrize("index", WRITTEN)
@pytest.mark.parametrize("kind", ["required", "named"])
def test_the_templates_call_is_what_the_grammar_makes_the_model_write(
    index: int, kind: str
) -> None:
    found = prepared(index)
    choice = ToolChoice(ToolChoiceKind.ANY)
    if kind == "named":
        choice = ToolChoice(ToolChoiceKind.NAMED, CALL[0])
    grammar, _, before = found.prepared(TOOLS, choice)
    assert grammar.constraint is not None
    if grammar.calls == "json_array":  # SGLang's own required calls where the format has none
        text = json.dumps([{"name": CALL[0], "parameters": CALL[1]}])
    else:
        text = found.answer([CALL], TOOLS)
    assert accepts(found.tokenizer, grammar.constraint, before + text), before + text
    assert not accepts(found.tokenizer, grammar.constraint, before + "It is sunny.")


@pytest.mark.parametrize("index", WRITTEN)
def test_the_call_reads_back_as_sglangs_detector_reads_it(index: int) -> None:
    found = prepared(index)
    text = found.answer([CALL], TOOLS)
    theirs = sglang_reads(found.form, TOOLS, text, found.tokenizer)
    assert theirs == [CALL], text
    assert node_reads(found, text) == theirs


@pytest.mark.parametrize("index", UNREAD)
def test_where_sglang_cannot_read_the_templates_call_the_grammar_writes_what_it_reads(
    index: int,
) -> None:
    """The family's own call strings (its `call`): the form SGLang's detector reads."""
    found = prepared(index)
    text = found.answer([CALL], TOOLS)
    assert sglang_reads(found.form, TOOLS, text, found.tokenizer) != [CALL], text
    grammar, _, before = found.prepared(TOOLS, ToolChoice(ToolChoiceKind.ANY))
    assert grammar.constraint is not None
    assert not accepts(found.tokenizer, grammar.constraint, before + text)
    call = found.form.family.call
    assert call is not None
    own = call.block_begin + call.opening(CALL[0]) + json.dumps(CALL[1]) + call.end
    own += call.block_end
    assert accepts(found.tokenizer, grammar.constraint, before + own), own
    assert sglang_reads(found.form, TOOLS, own, found.tokenizer) == [CALL] == node_reads(found, own)


def node_reads(found: Format, text: str) -> list[tuple[str, Any]]:
    """What the node reads of an answer of calls, the reasoning its prompt opens closed first."""
    _, reader, before = found.prepared(TOOLS, ToolChoice(ToolChoiceKind.AUTO))
    return calls_of(reader.feed(before + text) + reader.finish())


def calls_of(events: list[Event]) -> list[tuple[str, dict[str, Any]]]:
    calls: dict[int, list[Any]] = {}
    for event in events:
        if isinstance(event, ToolCallStart):
            calls[event.index] = [event.name, ""]
        elif isinstance(event, ToolCallDelta):
            calls[event.index][1] += event.arguments
    return [(name, json.loads(arguments)) for name, arguments in calls.values()]


def test_an_enum_value_is_read_without_the_whitespace_the_grammar_lets_stand_around_it() -> None:
    """xgrammar's qwen_xml style lets whitespace stand around a value; SGLang's detector keeps it
    in a string: a value of an enum so read would not validate, and the node takes it without."""
    [index] = [i for i, entry in enumerate(published()) if entry.id == "Qwen3.5-9B"]
    found = prepared(index)
    schema = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}},
              "required": ["unit"]}  # fmt: skip
    tools = (Tool("convert", None, schema),)
    text = "<tool_call>\n<function=convert>\n<parameter=unit> fahrenheit\n\n</parameter>\n"
    text += "</function>\n</tool_call>"
    grammar, reader, before = found.prepared(tools, ToolChoice(ToolChoiceKind.ANY))
    assert grammar.constraint is not None
    assert accepts(found.tokenizer, grammar.constraint, before + text)
    assert sglang_reads(found.form, tools, text, found.tokenizer) == [
        ("convert", {"unit": " fahrenheit\n"})
    ]
    assert calls_of(reader.feed(before + text) + reader.finish()) == [
        ("convert", {"unit": "fahrenheit"})
    ]


def test_the_docs_table_of_formats_is_the_one_the_families_make() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "families.md").read_text()
    assert table() in doc, (
        "docs/families.md's table of formats: paste `python -m tests.families.table`"
    )

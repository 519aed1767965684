"""The constraint built for each tool choice and output format, checked by what xgrammar's matcher
lets the embedded model write under it (ChatML taught Qwen's JSON calls)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from grammars import ModelFormat, format_of
from grammars.constraints import constraint_for, explain
from grammars.prompt import taught_call
from server.canonical import (
    FreeForm,
    GenerateRequest,
    Message,
    ResponseFormat,
    Text,
    ThinkingConfig,
    ThinkingMode,
    Tool,
    ToolCall,
    ToolChoice,
    ToolChoiceKind,
)
from server.config import default_cache_dir
from server.engines.base import Constraint
from server.errors import ConstraintRejected
from server.models.embedded import ensure_converted
from server.tokenizer import load_tokenizer
from tests.unit.grammar_check import accepts

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = (Tool("a", None, SCHEMA, schema_path="tools.0.input_schema"), Tool("b", None, SCHEMA))


@cache
def tokenizer() -> Any:
    return load_tokenizer(str(ensure_converted(default_cache_dir())))


@cache
def chatml() -> ModelFormat:
    return format_of(tokenizer())


def request(**fields: Any) -> GenerateRequest:
    return GenerateRequest("m", (Message("user", (Text("Hi"),)),), **fields)


def constraint(req: GenerateRequest, reasons: bool = False) -> Constraint:
    form = chatml()
    found = constraint_for(req, form, form.reasoning if reasons else None, opened=reasons)
    found = found.constraint
    assert found is not None
    return found


def call(name: str, arguments: dict[str, Any]) -> str:
    return taught_call(chatml().family, ToolCall("c", name, json.dumps(arguments)))


def takes(found: Constraint, text: str) -> bool:
    return accepts(tokenizer(), found, text)


PARIS = call("a", {"city": "Paris"})
OSLO = call("b", {"city": "Oslo"})


def test_no_tools_and_no_format_means_no_grammar() -> None:
    form = chatml()
    assert constraint_for(request(), form).constraint is None
    none = request(tools=TOOLS, tool_choice=ToolChoice(ToolChoiceKind.NONE))
    assert constraint_for(none, form).constraint is None


def test_auto_lets_text_run_until_a_call_opens() -> None:
    auto = constraint(request(tools=TOOLS))
    assert takes(auto, "Just text.")
    assert takes(auto, "Let me look.\n" + PARIS + "\n" + OSLO)
    assert not takes(auto, call("a", {"town": "Paris"}))  # once opened, the schema holds


@pytest.mark.parametrize("parallel", [True, False])
def test_any_is_calls_only_at_least_one(parallel: bool) -> None:
    choice = ToolChoice(ToolChoiceKind.ANY, parallel=parallel)
    any_call = constraint(request(tools=TOOLS, tool_choice=choice))
    assert takes(any_call, PARIS)
    assert takes(any_call, PARIS + "\n" + OSLO) is parallel
    assert not takes(any_call, "")
    assert not takes(any_call, "Sure. " + PARIS)


@pytest.mark.parametrize("parallel", [True, False])
def test_named_is_that_call_once(parallel: bool) -> None:
    choice = ToolChoice(ToolChoiceKind.NAMED, "b", parallel=parallel)
    named = constraint(request(tools=TOOLS, tool_choice=choice))
    assert takes(named, OSLO)
    assert not takes(named, PARIS)
    assert not takes(named, OSLO + "\n" + OSLO)


def test_json_formats() -> None:
    schema = constraint(request(response_format=ResponseFormat("json_schema", SCHEMA)))
    assert takes(schema, '{"city": "Paris"}')
    assert not takes(schema, '{"town": "Paris"}')
    assert takes(constraint(request(response_format=ResponseFormat("json_object"))), '{"x": 1}')


def test_auto_tools_with_a_format_answer_json_or_calls() -> None:
    either = constraint(request(tools=TOOLS, response_format=ResponseFormat("json_schema", SCHEMA)))
    assert takes(either, '{"city": "Paris"}')
    assert takes(either, PARIS)
    assert not takes(either, "Text.")


def test_a_string_of_bounded_length_takes_raw_control_characters() -> None:
    """xgrammar's (0.2.7) grammar of a string with minLength or maxLength takes any character
    but quotes, backslashes and line ends, a raw control character among them (a random Kimi
    model wrote \\x07 in a city): the reader escapes it (test_reading). Fails once xgrammar
    refuses it, and the reader's escape can go."""
    bounded = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}}
    calls = constraint(
        request(tools=(Tool("a", None, bounded),), tool_choice=ToolChoice(ToolChoiceKind.ANY))
    )
    assert takes(calls, call("a", {"city": "Paris"}).replace("Paris", "Par\x07s"))
    assert not takes(calls, call("a", {"city": "Parisienne"}))


def test_generated_json_has_bounded_whitespace() -> None:
    schema = constraint(request(response_format=ResponseFormat("json_schema", SCHEMA)))
    assert takes(schema, '{ "city":  "Paris" }')
    assert not takes(schema, '{"city":      "Paris"}')


def test_a_free_form_call_takes_its_grammar() -> None:
    from grammars.constraints import free_form

    digits = free_form("regex", "[0-9]+", "tools.0.format")
    tools = (Tool("count", None, {}, free_form=digits),)
    required = constraint(request(tools=tools, tool_choice=ToolChoice(ToolChoiceKind.ANY)))
    written = taught_call(chatml().family, ToolCall("c", "count", "123", free_form=True))
    assert takes(required, written)
    assert not takes(required, written.replace("123", "12a"))
    assert FreeForm().grammar is None


def test_a_rejected_grammar_names_the_schema_xgrammar_refuses() -> None:
    bad = Tool(
        "c",
        None,
        {"type": "object", "properties": {"x": {"$ref": "#/$defs/nope"}}},
        schema_path="tools.2.input_schema",
    )
    error = explain(request(tools=(*TOOLS, bad)), ConstraintRejected("Cannot find field $defs"))
    assert error.param == "tools.2.input_schema"
    assert error.message.startswith("tools.2.input_schema: this JSON Schema cannot be compiled")


def test_reasoning_comes_first_then_the_answer() -> None:
    budgeted = request(
        thinking=ThinkingConfig(ThinkingMode.ENABLED, 1024),
        response_format=ResponseFormat("json_schema", SCHEMA),
    )
    found = constraint(budgeted, reasons=True)
    # The prompt opens it; the grammar closes it before the answer.
    assert takes(found, '\nLet me see.\n</think>\n\n{"city": "Paris"}')
    assert not takes(found, '{"city": "Paris"}')
    tag = json.loads(found.value)["format"]["elements"][0]["elements"][0]
    assert tag["content"]["max_tokens"] == 1024  # where the budget closes it


def test_adaptive_reasoning_has_no_budget_and_free_text_follows() -> None:
    found = constraint(request(thinking=ThinkingConfig(ThinkingMode.ADAPTIVE)), reasons=True)
    tag = json.loads(found.value)["format"]["elements"][0]["elements"][0]
    assert "max_tokens" not in tag["content"]
    assert takes(found, "Hm.</think>\n\nAny text.")

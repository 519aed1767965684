"""The constraint built for each tool choice and output format (the structural tag SGLang gets)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from grammars import family_for
from server.canonical import (
    GenerateRequest,
    Message,
    ResponseFormat,
    Text,
    ThinkingConfig,
    ThinkingMode,
    Tool,
    ToolChoice,
    ToolChoiceKind,
)
from server.constraints import constraint_for, explain
from server.errors import ConstraintRejected

CHATML = family_for("<|im_start|>")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = (Tool("a", None, SCHEMA, schema_path="tools.0.input_schema"), Tool("b", None, SCHEMA))


def request(**fields: Any) -> GenerateRequest:
    return GenerateRequest("m", (Message("user", (Text("Hi"),)),), **fields)


def root(req: GenerateRequest) -> dict[str, Any]:
    constraint = constraint_for(req, CHATML)
    assert constraint is not None
    assert constraint.kind == "structural_tag"
    tag = json.loads(constraint.value)
    assert tag["type"] == "structural_tag"
    return dict(tag["format"])


def test_no_tools_and_no_format_means_no_grammar() -> None:
    assert constraint_for(request(), CHATML) is None
    assert (
        constraint_for(request(tools=TOOLS, tool_choice=ToolChoice(ToolChoiceKind.NONE)), CHATML)
        is None
    )


def test_auto_lets_text_run_until_a_call_opens() -> None:
    form = root(request(tools=TOOLS))
    assert form["type"] == "triggered_tags"
    assert form["triggers"] == ["<tool_call>"]
    assert [t["begin"] for t in form["tags"]] == [
        '<tool_call>\n{"name": "a", "arguments": ',
        '<tool_call>\n{"name": "b", "arguments": ',
    ]
    assert form["tags"][0]["end"] == "}\n</tool_call>"
    assert form["tags"][0]["content"]["json_schema"] == SCHEMA
    assert form["stop_after_first"] is False


@pytest.mark.parametrize("parallel", [True, False])
def test_any_is_calls_only_at_least_one(parallel: bool) -> None:
    form = root(request(tools=TOOLS, tool_choice=ToolChoice(ToolChoiceKind.ANY, parallel=parallel)))
    assert form["type"] == "tags_with_separator"
    assert form["at_least_one"] is True
    assert form["stop_after_first"] is (not parallel)
    assert len(form["tags"]) == 2


@pytest.mark.parametrize("parallel", [True, False])
def test_named_is_that_call_once(parallel: bool) -> None:
    choice = ToolChoice(ToolChoiceKind.NAMED, "b", parallel=parallel)
    form = root(request(tools=TOOLS, tool_choice=choice))
    assert [t["begin"] for t in form["tags"]] == ['<tool_call>\n{"name": "b", "arguments": ']
    assert form["at_least_one"] is True
    assert form["stop_after_first"] is True  # parallel calls on or off


def test_json_formats() -> None:
    assert (
        root(request(response_format=ResponseFormat("json_schema", SCHEMA)))["json_schema"]
        == SCHEMA
    )
    assert root(request(response_format=ResponseFormat("json_object")))["json_schema"] == {
        "type": "object"
    }


def test_auto_tools_with_a_format_answer_json_or_calls() -> None:
    form = root(request(tools=TOOLS, response_format=ResponseFormat("json_schema", SCHEMA)))
    assert form["type"] == "or"
    assert [e["type"] for e in form["elements"]] == ["tags_with_separator", "json_schema"]


def test_generated_json_has_bounded_whitespace() -> None:
    form = root(request(response_format=ResponseFormat("json_schema", SCHEMA)))
    assert form["max_whitespace_cnt"] >= 1


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


def test_reasoning_comes_first_with_its_budget_then_the_answer() -> None:
    thinking = CHATML.thinking
    assert thinking is not None
    budgeted = request(
        thinking=ThinkingConfig(ThinkingMode.ENABLED, 1024),
        response_format=ResponseFormat("json_schema", SCHEMA),
    )
    constraint = constraint_for(budgeted, CHATML, thinking)
    assert constraint is not None
    form = json.loads(constraint.value)["format"]
    assert form["type"] == "sequence"
    reasoning, answer = form["elements"]
    tag, after = reasoning["elements"]
    assert (tag["begin"], tag["end"]) == ("", "</think>")  # the prompt opened it
    assert tag["content"]["max_tokens"] == 1024
    assert after == {"type": "const_string", "value": "\n\n"}
    assert answer["json_schema"] == SCHEMA


def test_adaptive_reasoning_has_no_budget_and_free_text_follows() -> None:
    thinking = CHATML.thinking
    assert thinking is not None
    constraint = constraint_for(
        request(thinking=ThinkingConfig(ThinkingMode.ADAPTIVE)), CHATML, thinking
    )
    assert constraint is not None
    reasoning, answer = json.loads(constraint.value)["format"]["elements"]
    assert "max_tokens" not in reasoning["elements"][0]["content"]
    assert answer == {"type": "any_text"}

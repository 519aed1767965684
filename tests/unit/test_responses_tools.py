"""Responses tools beyond functions: namespaces (the model writes `namespace.name`, the call comes
back as the name inside with its namespace), custom tools (free-form input, held to a Lark
grammar or regular expression), and OpenAI's hosted tools (refused, or left out with
`--compat codex`): decoded, encoded, rendered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import orjson
import pytest
from xgrammar import GrammarMatcher, TokenizerInfo

from grammars import ModelFormat, family
from grammars.constraints import constraint_for
from grammars.prompt import taught_call
from server.canonical import (
    Event,
    Finish,
    FinishReason,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoiceKind,
    Usage,
    fold,
)
from server.errors import ConstraintRejected, InvalidRequest, UnsupportedParameter
from server.protocols.responses.decode import ResponsesEcho, decode_responses
from server.protocols.responses.encode import ResponseStream, response_body
from server.protocols.responses.tools import ResponsesOptions
from tests.unit.encoding import REQUEST_ID, context, parse_sse

ULID = REQUEST_ID.removeprefix("req_")
CHATML = family("chatml")
PATCH_GRAMMAR = """start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?
hunk: add_hunk | delete_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
filename: /(.+)/
add_line: "+" /(.*)/ LF -> line
%import common.LF
"""
NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [
        {"type": "function", "name": "find", "parameters": {"type": "object"}},
        {"type": "custom", "name": "query", "format": {"type": "text"}},
    ],
}
PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
}
ZIP = {
    "type": "custom",
    "name": "zip",
    "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]{5}"},
}


def body(**members: Any) -> dict[str, Any]:
    return {"model": "m", "input": "Hi", **members}


def test_a_namespace_offers_its_tools_under_its_name() -> None:
    request, echo = decode_responses(body(tools=[NAMESPACE, PATCH, ZIP]))
    names = [(tool.name, tool.namespace, tool.free_form is not None) for tool in request.tools]
    assert names == [
        ("crm.find", "crm", False),
        ("crm.query", "crm", True),
        ("apply_patch", None, True),
        ("zip", None, True),
    ]
    assert echo.targets["crm.query"].name == "query" and echo.targets["crm.query"].custom
    assert echo.tools[0]["type"] == "namespace" and len(echo.tools[0]["tools"]) == 2
    assert request.tools[2].free_form is not None
    assert request.tools[2].free_form.syntax == "lark" and request.tools[2].free_form.grammar


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({**PATCH, "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
         "tools.0.format.definition"),
        ({**ZIP, "format": {"type": "grammar", "syntax": "regex", "definition": "a(?=b)"}},
         "tools.0.format.definition"),
    ],
)  # fmt: skip
def test_a_grammar_xgrammar_cannot_compile_is_a_400_naming_it(
    tool: dict[str, Any], param: str
) -> None:
    with pytest.raises(ConstraintRejected) as raised:
        decode_responses(body(tools=[tool]))
    assert raised.value.status == 400 and raised.value.param == param
    assert "cannot be compiled" in raised.value.message and "/project/" not in raised.value.message


def test_hosted_tools_are_refused_unless_the_codex_profile_leaves_them_out() -> None:
    tools = [{"type": "web_search", "external_web_access": False}, PATCH]
    with pytest.raises(UnsupportedParameter) as raised:
        decode_responses(body(tools=tools))
    assert raised.value.param == "tools.0.type"
    request, echo = decode_responses(body(tools=tools), ResponsesOptions(drop_hosted_tools=True))
    assert [tool.name for tool in request.tools] == ["apply_patch"]
    assert echo.tools[0] == tools[0]  # repeated as sent


def test_names_are_unique_within_a_namespace_only() -> None:
    again = {**NAMESPACE, "name": "other"}
    request, _ = decode_responses(body(tools=[NAMESPACE, again]))
    assert {tool.local_name for tool in request.tools} == {"find", "query"}
    twice = {**NAMESPACE, "tools": [*NAMESPACE["tools"], NAMESPACE["tools"][0]]}
    with pytest.raises(InvalidRequest) as raised:
        decode_responses(body(tools=[twice]))
    assert raised.value.param == "tools.0.tools.2.name"


def test_tool_choice_names_a_custom_tool_or_a_function_in_a_namespace() -> None:
    request, echo = decode_responses(
        body(tools=[NAMESPACE, PATCH], tool_choice={"type": "custom", "name": "apply_patch"})
    )
    assert request.tool_choice.kind is ToolChoiceKind.NAMED
    assert request.tool_choice.name == "apply_patch"
    assert echo.tool_choice == {"type": "custom", "name": "apply_patch"}
    request, _ = decode_responses(
        body(tools=[NAMESPACE], tool_choice={"type": "function", "name": "find"})
    )
    assert request.tool_choice.name == "crm.find"
    with pytest.raises(InvalidRequest):  # a function, not a custom tool
        decode_responses(body(tools=[NAMESPACE], tool_choice={"type": "custom", "name": "find"}))


def test_calls_sent_back_are_understood() -> None:
    items = [
        {"role": "user", "content": "Fix it."},
        {"type": "function_call", "call_id": "c1", "name": "find", "namespace": "crm",
         "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** x"},
        {"type": "function_call_output", "call_id": "c1", "output": "none"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done!"},
    ]  # fmt: skip
    request, _ = decode_responses({"model": "m", "input": items, "tools": [NAMESPACE, PATCH]})
    assistant = request.messages[1]
    assert assistant.parts == (
        ToolCall("c1", "crm.find", "{}"),
        ToolCall("c2", "apply_patch", "*** x", free_form=True),
    )
    assert [m.role for m in request.messages] == ["user", "assistant", "tool", "tool"]


def test_the_prompt_shows_custom_tools_and_how_to_call_them() -> None:
    from grammars.prompt import _tool_json

    request, _ = decode_responses(body(tools=[NAMESPACE, PATCH]))
    shown = _tool_json(request.tools[2])
    assert shown == {
        "type": "custom",
        "custom": {"name": "apply_patch", "description": "Edit files.",
                   "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR}},
    }  # fmt: skip
    written = taught_call(CHATML, ToolCall("c", "apply_patch", "*** x", free_form=True))
    assert written == '<tool_call>\n{"name": "apply_patch"}\n*** x\n</tool_call>'


@pytest.fixture(scope="module")
def compile_tag() -> Any:
    import xgrammar

    compiler = xgrammar.GrammarCompiler(TokenizerInfo([]))

    def check(request: Any, text: str) -> bool:
        constraint = constraint_for(request, ModelFormat(CHATML)).constraint
        assert constraint is not None
        compiled = compiler.compile_structural_tag(constraint.value)
        matcher = GrammarMatcher(compiled, terminate_without_stop_token=True)
        return bool(matcher.accept_string(text)) and matcher.is_terminated()

    return check


def test_the_grammar_holds_a_custom_call_to_its_format(compile_tag: Any) -> None:
    request, _ = decode_responses(body(tools=[PATCH, ZIP], tool_choice="required"))
    good = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"

    def call(name: str, text: str, free_form: bool = True) -> str:
        return taught_call(CHATML, ToolCall("c", name, text, free_form))

    assert compile_tag(request, call("apply_patch", good))
    assert compile_tag(request, call("zip", "12345"))
    assert not compile_tag(request, call("zip", "1234a"))
    assert not compile_tag(request, call("apply_patch", "rm -rf /"))
    assert not compile_tag(request, call("zip", '{"a": 1}', free_form=False))  # no JSON form


ECHO = ResponsesEcho(targets=decode_responses(body(tools=[NAMESPACE, PATCH]))[1].targets)
CUSTOM_CALL = (
    ToolCallStart(0, "abc", "apply_patch"),
    ToolCallDelta(0, "*** Begin"),
    ToolCallDelta(0, " Patch"),
    ToolCallEnd(0),
    ToolCallStart(1, "def", "crm.find"),
    ToolCallDelta(1, "{}"),
    ToolCallEnd(1),
    Finish(FinishReason.TOOL_USE, Usage(7, 5)),
)


def folded(events: Sequence[Event]) -> dict[str, Any]:
    async def generate() -> AsyncGenerator[Event, None]:
        for event in events:
            yield event

    return response_body(asyncio.run(fold(generate())), context(), ECHO)


def test_a_custom_call_and_a_namespaced_call_as_items() -> None:
    output = folded(CUSTOM_CALL)["output"]
    assert output == [
        {"id": f"ctc_{ULID}000", "type": "custom_tool_call", "status": "completed",
         "input": "*** Begin Patch", "call_id": "call_abc", "name": "apply_patch"},
        {"id": f"fc_{ULID}001", "type": "function_call", "status": "completed",
         "arguments": "{}", "call_id": "call_def", "name": "find", "namespace": "crm"},
    ]  # fmt: skip


def test_a_custom_call_streams_its_input() -> None:
    stream = ResponseStream(context(), ECHO)
    raw = stream.start() + b"".join(stream.encode(event) for event in CUSTOM_CALL)
    events = parse_sse(raw)
    names = [name for name, _ in events]
    assert names[2:7] == [
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
    ]
    added, done = events[2][1], events[6][1]
    assert added["item"]["type"] == "custom_tool_call" and added["item"]["input"] == ""
    assert events[5][1]["input"] == "*** Begin Patch"
    assert "name" not in events[5][1]
    assert done["item"] == folded(CUSTOM_CALL)["output"][0]
    assert events[-1][1]["response"]["output"] == folded(CUSTOM_CALL)["output"]
    assert "response.function_call_arguments.done" in names[7:]


def test_the_openai_sdk_reads_both_items() -> None:
    from openai.types.responses import Response

    body = folded(CUSTOM_CALL)
    response = Response.model_validate(orjson.loads(orjson.dumps(body)))
    custom, function = response.output
    assert custom.type == "custom_tool_call" and custom.input == "*** Begin Patch"
    assert function.type == "function_call" and function.name == "find"


def test_the_response_repeats_the_sampling_the_answer_gets() -> None:
    """What the request left unset is the model's recommendation; what it set, its own."""
    defaults = {"temperature": 0.2, "top_p": 0.9}
    _, echo = decode_responses(body())
    assert (echo.temperature, echo.top_p) == (1.0, 1.0)  # OpenAI's, without a recommendation
    sampled = echo.sampled_as(defaults)
    assert (sampled.temperature, sampled.top_p) == (0.2, 0.9)
    _, echo = decode_responses(body(temperature=0.7))
    assert (echo.sampled_as(defaults).temperature, echo.sampled_as(defaults).top_p) == (0.7, 0.9)

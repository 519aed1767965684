"""One xgrammar constraint per request, from its tool choice and output format, in the model
family's tool-call format: a structural tag SGLang compiles (and caches) with xgrammar. Every
tool call and every JSON answer is generated under it, so validity is guaranteed, not hoped for.

    tool_choice auto   free text; once the model opens a call, its arguments follow the schema
    tool_choice any    tool calls only, at least one        (OpenAI: required)
    tool_choice named  one call of that tool: that call, once (parallel calls or not)
    tool_choice none   no grammar for calls: the parser leaves such text as text
    no parallel calls  at most one call (exactly one with any)
    JSON format        the answer is JSON matching the schema (or any object); with auto tools,
                       the answer is that JSON or tool calls
    thinking           all of the above comes after a reasoning phase, which the grammar closes
                       when its budget of tokens is spent
    free-form tools    the call's input is any text up to the call's end, or the text its Lark
                       grammar or regular expression describes (`free_form` translates them)
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from grammars import ModelFamily, ThinkingFormat, ToolFormat
from server.canonical import FreeForm, GenerateRequest, ThinkingMode, Tool, ToolChoiceKind
from server.engines.base import Constraint
from server.errors import ConstraintRejected

# Bounds runs of whitespace inside generated JSON: small models under a JSON grammar otherwise
# fall into endless whitespace.
MAX_WHITESPACE = 2
ANY_OBJECT: dict[str, Any] = {"type": "object"}
ANY_TEXT: dict[str, Any] = {"type": "any_text"}

Format = dict[str, Any]
# Where in its C++ sources xgrammar raised an error: "[05:12:11] /project/cpp/x.cc:83: ".
_COMPILER_PLACE = re.compile(r"\[[0-9:]+\] \S+\.cc:[0-9]+: ")


def constraint_for(
    request: GenerateRequest, family: ModelFamily, thinking: ThinkingFormat | None = None
) -> Constraint | None:
    """`thinking`: the answer reasons first, in that format; the rest applies after it."""
    root = _answer(request, family)
    if thinking is not None:
        reasoning = _reasoning(request, thinking)
        root = {"type": "sequence", "elements": [reasoning, root or ANY_TEXT]}
    if root is None:
        return None
    tag = orjson.dumps({"type": "structural_tag", "format": root}).decode()
    return Constraint("structural_tag", tag)


def _reasoning(request: GenerateRequest, thinking: ThinkingFormat) -> Format:
    """The reasoning runs until the model closes it, or until its budget of tokens is spent,
    where the grammar closes it (its opening tag ends the prompt)."""
    text: Format = {"type": "any_text", "excludes": [thinking.open.strip(), thinking.close]}
    if request.thinking.mode is ThinkingMode.ENABLED and request.thinking.budget_tokens:
        text["max_tokens"] = request.thinking.budget_tokens
    tag = {"type": "tag", "begin": "", "content": text, "end": thinking.close}
    return {
        "type": "sequence",
        "elements": [tag, {"type": "const_string", "value": thinking.after}],
    }


def _answer(request: GenerateRequest, family: ModelFamily) -> Format | None:
    answer = _json(request)
    tools = family.tools
    calls = None if tools is None else calls_format(request, tools)
    if family.answer_begin:  # every answer opens so, or is calls
        opened = {"type": "const_string", "value": family.answer_begin}
        answer = {"type": "sequence", "elements": [opened, answer or ANY_TEXT]}
    if calls is None:
        return answer
    if answer is not None and request.tool_choice.kind is ToolChoiceKind.AUTO:
        assert tools is not None
        return {"type": "or", "elements": [_calls_only(request, tools), answer]}
    return calls


def calls_format(request: GenerateRequest, tools: ToolFormat) -> Format | None:
    kind = request.tool_choice.kind
    if not request.tools or kind is ToolChoiceKind.NONE:
        return None
    if kind is not ToolChoiceKind.AUTO:
        return _calls_only(request, tools)
    one = not (request.tool_choice.parallel and tools.parallel)
    tags = [_tag(tool, tools) for tool in request.tools]
    if tools.block_begin:  # one block of calls, opened by its trigger
        block = _block(tools, tags, one)
        return {"type": "triggered_tags", "triggers": [tools.trigger], "tags": [block],
                "stop_after_first": True}  # fmt: skip
    return {"type": "triggered_tags", "triggers": [tools.trigger], "tags": tags,
            "stop_after_first": one}  # fmt: skip


def _calls_only(request: GenerateRequest, tools: ToolFormat) -> Format:
    """Calls only, at least one, of any tool; or exactly one of the named tool (a second one
    would be another call than the one asked for)."""
    choice = request.tool_choice
    named = choice.kind is ToolChoiceKind.NAMED
    allowed = [tool for tool in request.tools if not named or tool.name == choice.name]
    one = named or not (choice.parallel and tools.parallel)
    return _block(tools, [_tag(tool, tools) for tool in allowed], one)


def _block(tools: ToolFormat, tags: list[Format], one: bool) -> Format:
    """At least one call of these, separated as the format separates them; in its block where
    the format has one."""
    calls = {
        "type": "tags_with_separator",
        "tags": tags,
        "separator": tools.separator,
        "at_least_one": True,
        "stop_after_first": one,
    }
    if not tools.block_begin:
        return calls
    return {"type": "tag", "begin": tools.block_begin, "content": calls, "end": tools.block_end}


def _tag(tool: Tool, tools: ToolFormat) -> Format:
    free_form = tool.free_form
    if free_form is not None:
        content: Format = ANY_TEXT
        if free_form.grammar is not None:
            content = {"type": "grammar", "grammar": free_form.grammar}
        return {
            "type": "tag",
            "begin": tools.call_begin + tool.name + tools.input_begin,
            "content": content,
            "end": tools.input_end,
        }
    return {
        "type": "tag",
        "begin": tools.call_begin + tool.name + tools.arguments_begin,
        "content": _schema(tool.input_schema, tools.arguments),
        "end": tools.call_end,
    }


def _json(request: GenerateRequest) -> Format | None:
    form = request.response_format
    if form is None:
        return None
    return _schema(form.schema if form.kind == "json_schema" and form.schema else ANY_OBJECT)


def _schema(schema: dict[str, Any], style: str = "json") -> Format:
    """`style`: the arguments as JSON, or as xgrammar's `qwen_xml` parameters."""
    form: Format = {
        "type": "json_schema",
        "json_schema": schema,
        "max_whitespace_cnt": MAX_WHITESPACE,
    }
    if style != "json":
        form["style"] = style
    return form


def free_form(syntax: str, definition: str, path: str) -> FreeForm:
    """A custom tool's input format: any text, or a Lark grammar or regular expression
    translated by xgrammar into its EBNF (the runtime compiles that). What xgrammar cannot
    translate is a 400 that names the format and says why."""
    if syntax == "text":
        return FreeForm()
    from xgrammar import Grammar

    try:
        if syntax == "lark":
            grammar = Grammar.from_lark(definition)
        else:
            grammar = Grammar.from_regex(definition)
    except (RuntimeError, ValueError) as error:
        reason = _COMPILER_PLACE.sub("", " ".join(str(error).split()))
        noun = "Lark grammar" if syntax == "lark" else "regular expression"
        raise ConstraintRejected(
            f"{path}: this {noun} cannot be compiled into a grammar: {reason}", param=path
        ) from None
    return FreeForm(syntax, definition, str(grammar))  # type: ignore[arg-type]


def explain(request: GenerateRequest, error: ConstraintRejected) -> ConstraintRejected:
    """The runtime could not compile the request's grammar: name the schema at fault."""
    schemas = [(tool.schema_path, tool.input_schema) for tool in request.tools]
    form = request.response_format
    if form is not None and form.schema is not None:
        schemas.append((form.schema_path, form.schema))
    path = _first_refused(schemas)
    where = f"{path}: " if path else ""
    return ConstraintRejected(
        f"{where}this JSON Schema cannot be compiled into a grammar: {error.message}", param=path
    )


def _first_refused(schemas: list[tuple[str, dict[str, Any]]]) -> str | None:
    """Compiles each schema alone with xgrammar (the runtime's compiler, fast and tokenizer-free)
    to find the one it refuses; without xgrammar here, the only schema if there is one."""
    try:
        from xgrammar import Grammar
    except ImportError:
        return schemas[0][0] if len(schemas) == 1 else None
    for path, schema in schemas:
        try:
            Grammar.from_json_schema(orjson.dumps(schema).decode())
        except (RuntimeError, ValueError):
            return path
    return None

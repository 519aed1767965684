"""One xgrammar constraint per request, from its tool choice and output format, in the model's own
format: the calls as the libraries write them, in this order of preference,

1. xgrammar's model structural tag named by the family (`get_model_structural_tag`);
2. the tags of the SGLang detector's own structure information (`structure_info`);
3. where neither has the format, what SGLang's own server does: calls are unconstrained under
   `auto`, and a required or named call is a JSON array of calls (`get_json_schema_constraint`),
   read by SGLang's JSON array parser.

Around them, the node's own rules:

    tool_choice auto   free text; once the model opens a call, its arguments follow the schema
    tool_choice any    tool calls only, at least one        (OpenAI: required)
    tool_choice named  one call of that tool, once
    tool_choice none   no grammar for calls: such text stays text
    no parallel calls  at most one call (exactly one with any)
    JSON format        the answer is JSON matching the schema; with auto tools, that or calls
    thinking           all of the above follows a reasoning phase, which the grammar closes when
                       its budget of tokens is spent
    free-form tools    the family's own call of free-form input, its text any text or what its
                       Lark grammar or regular expression describes
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from grammars import libraries
from grammars.family import CallFormat
from grammars.reading import Calls
from grammars.recognize import ModelFormat, Reasoning
from server.canonical import FreeForm, GenerateRequest, ThinkingMode, Tool, ToolChoiceKind
from server.engines.base import Constraint
from server.errors import ConstraintRejected

# Bounds runs of whitespace inside generated JSON: small models under a JSON grammar otherwise
# fall into endless whitespace.
MAX_WHITESPACE = 2
ANY_OBJECT: dict[str, Any] = {"type": "object"}
ANY_TEXT: dict[str, Any] = {"type": "any_text"}
# Between calls: what templates write there (a newline or two), bounded as JSON's whitespace is
# (a small model otherwise writes whitespace to its last token).
BETWEEN_CALLS: dict[str, Any] = {"type": "regex", "pattern": f"[ \\t\\n]{{0,{MAX_WHITESPACE}}}"}
# The reasoning of a model whose xgrammar tag writes it among its messages (Kimi K3's).
INSIDE: dict[str, Any] = {"type": "const_string", "value": ""}

Format = dict[str, Any]
# Where in its C++ sources xgrammar raised an error: "[05:12:11] /project/cpp/x.cc:83: ".
_COMPILER_PLACE = re.compile(r"\[[0-9:]+\] \S+\.cc:[0-9]+: ")


@dataclass(frozen=True, slots=True)
class Grammar:
    constraint: Constraint | None
    calls: Calls | None  # how the answer's calls are written; None: it has none to read


def constraint_for(
    request: GenerateRequest,
    form: ModelFormat,
    reasoning: Reasoning | None = None,
    opened: bool = False,
) -> Grammar:
    """`reasoning`: the answer reasons first (`opened`: its opening tag ends the prompt)."""
    calls = _calls(request, form, reasoning)
    root = _answer(request, form, calls)
    if reasoning is not None:
        if calls is not None and calls.reasoning == INSIDE:  # xgrammar's tag writes it all
            root = _budgeted(root or ANY_TEXT, _budget(request))
        else:
            prefix = _reasoning(request, reasoning, opened)
            if calls is not None and calls.reasoning is not None:  # the model's own (xgrammar)
                prefix = _budgeted(calls.reasoning, _budget(request))
            root = {"type": "sequence", "elements": [prefix, root or ANY_TEXT]}
    constraint = None
    if root is not None:
        tag = orjson.dumps({"type": "structural_tag", "format": root}).decode()
        constraint = Constraint("structural_tag", tag)
    return Grammar(constraint, calls.reading if calls is not None else None)


@dataclass(frozen=True, slots=True)
class _Calls:
    reading: Calls
    auto: Format | None = None  # text, and calls once one opens
    only: Format | None = None  # calls only, as the choice wants them
    array: dict[str, Any] | None = None  # SGLang's JSON array schema, where nothing else is
    reasoning: Format | None = None  # the reasoning before them, as xgrammar's tag writes it


def _reasoning(request: GenerateRequest, reasoning: Reasoning, opened: bool) -> Format:
    """The reasoning runs until the model closes it, or until its budget of tokens is spent,
    where the grammar closes it."""
    text: Format = {"type": "any_text", "excludes": [reasoning.open.strip(), reasoning.close]}
    if _budget(request):
        text["max_tokens"] = _budget(request)
    begin = "" if opened else reasoning.open
    tag = {"type": "tag", "begin": begin, "content": text, "end": reasoning.close}
    if not reasoning.after:
        return tag
    return {"type": "sequence", "elements": [tag, {"type": "const_string",
                                                   "value": reasoning.after}]}  # fmt: skip


def _budget(request: GenerateRequest) -> int | None:
    if request.thinking.mode is ThinkingMode.ENABLED:
        return request.thinking.budget_tokens
    return None


def _budgeted(found: Format, budget: int | None) -> Format:
    """`found` with its first free text held to `budget` tokens (where the grammar closes it)."""
    if budget is None:
        return found
    if found.get("type") == "any_text":
        return found | {"max_tokens": budget}
    for key in ("content", "elements"):
        inner = found.get(key)
        if isinstance(inner, dict):
            return found | {key: _budgeted(inner, budget)}
        if isinstance(inner, list) and inner:
            return found | {key: [_budgeted(inner[0], budget), *inner[1:]]}
    return found


def _answer(request: GenerateRequest, form: ModelFormat, calls: _Calls | None) -> Format | None:
    answer = _json(request)
    family = form.family
    if family.answer_begin:  # every answer opens so, or is calls
        opened = {"type": "const_string", "value": family.answer_begin}
        answer = {"type": "sequence", "elements": [opened, answer or ANY_TEXT]}
    if calls is not None and calls.array is not None:
        return _schema(calls.array)
    if calls is None:
        return answer
    if request.tool_choice.kind is not ToolChoiceKind.AUTO:
        return calls.only
    if answer is not None:
        if calls.only is None:
            return answer
        return {"type": "or", "elements": [calls.only, answer]}
    return calls.auto


def _calls(
    request: GenerateRequest, form: ModelFormat, reasoning: Reasoning | None
) -> _Calls | None:
    choice = request.tool_choice
    family = form.family
    if not request.tools or choice.kind is ToolChoiceKind.NONE or family.tool_parser is None:
        return None
    one = choice.kind is ToolChoiceKind.NAMED or not choice.parallel or family.one_call
    offered = [t for t in request.tools if choice.kind is not ToolChoiceKind.NAMED
               or t.name == choice.name]  # fmt: skip
    functions = [tool for tool in offered if tool.free_form is None]
    own = [_free_form_tag(tool, form) for tool in offered if tool.free_form is not None]
    if family.call is not None:
        return _written(family.call, functions, own, one)
    if family.structural_tag is not None:
        return _builtin(family.structural_tag, request, functions, own, one, reasoning)
    tags = _structure_tags(family.tool_parser, functions)
    if tags is None:
        return _array(request, functions, one)
    triggers = sorted({trigger for trigger, _ in tags})
    tags_only = [tag for _, tag in tags] + own
    auto = {"type": "triggered_tags", "triggers": triggers, "tags": tags_only,
            "stop_after_first": one}  # fmt: skip
    return _Calls("format", auto, _calls_only(tags_only, one))


def _builtin(
    name: str,
    request: GenerateRequest,
    functions: list[Tool],
    own: list[Format],
    one: bool,
    reasoning: Reasoning | None,
) -> _Calls:
    """From xgrammar's model structural tag: the calls, and where the answer reasons, the
    reasoning before them as the tag writes it (with the reasoning off, the tag writes what the
    model's template writes for none)."""
    from xgrammar import get_model_structural_tag

    if not functions:  # only free-form tools: the family's own calls
        triggers = sorted({tag["begin"] for tag in own})
        own_auto = {"type": "triggered_tags", "triggers": triggers, "tags": own,
                    "stop_after_first": one}  # fmt: skip
        return _Calls("format", own_auto, _calls_only(own, one))
    wanted: Any = "required"
    if request.tool_choice.kind is ToolChoiceKind.NAMED:
        wanted = {"type": "function", "function": {"name": functions[0].name}}
    prefixes: list[Format | None] = []

    def tag(choice: Any) -> Format:
        mode = "enabled" if reasoning is not None else "disabled"
        found = get_model_structural_tag(
            name, [_function(tool) for tool in functions], choice, reasoning=mode,
            parallel_tool_calls=not one, max_whitespace_cnt=MAX_WHITESPACE,
        )  # fmt: skip
        written = _bounded(dict(found.model_dump(mode="json", exclude_none=True)["format"]))
        prefix, calls = (None, written)
        if reasoning is not None:
            prefix, calls = _split_reasoning(written, reasoning.close)
        prefixes.append(prefix)
        return calls

    required = tag(wanted)
    auto: Format | None = None
    if request.tool_choice.kind is ToolChoiceKind.AUTO:
        auto = _with_own(tag("auto"), own) if own else tag("auto")
    return _Calls("format", auto, _only(required, own, one), reasoning=prefixes[0])


def _bounded(found: Any) -> Any:
    """The tag with its unbounded runs of digits (Kimi's call index, `\\d+`) held to three: a
    model can write digits without end there, and no answer holds a thousand calls."""
    if isinstance(found, dict):
        if found.get("type") == "regex" and found.get("pattern") == "\\d+":
            return found | {"pattern": "\\d{1,3}"}
        return {key: _bounded(value) for key, value in found.items()}
    if isinstance(found, list):
        return [_bounded(value) for value in found]
    return found


def _split_reasoning(written: Format, close: str) -> tuple[Format | None, Format]:
    """xgrammar's tag with the reasoning on: its reasoning block, then the rest; where the
    reasoning is not a block before the rest but among it, INSIDE and the whole; where it has
    none (the tag knows no reasoning), None and the whole."""
    elements = written.get("elements", [])
    if written.get("type") == "sequence" and len(elements) == 2 and _reasons(elements[0]):
        return elements[0], elements[1]
    return (INSIDE if close in orjson.dumps(written).decode() else None), written


def _reasons(found: Format) -> bool:
    """A reasoning block: a tag (or a tag and what follows it) around free text."""
    if found.get("type") == "sequence":
        return bool(found.get("elements")) and _reasons(found["elements"][0])
    return found.get("type") == "tag" and found.get("content", {}).get("type") == "any_text"


def _written(call: CallFormat, functions: list[Tool], own: list[Format], one: bool) -> _Calls:
    """Calls from the family's own `call` strings."""
    tags = [_call_tag(call, tool) for tool in functions] + own
    if not call.block_begin:
        auto = {"type": "triggered_tags", "triggers": [call.trigger], "tags": tags,
                "stop_after_first": one}  # fmt: skip
        return _Calls("format", auto, _calls_only(tags, one))
    inner = {"type": "tags_with_separator", "tags": tags, "separator": call.separator,
             "at_least_one": True, "stop_after_first": one}  # fmt: skip
    block = {"type": "tag", "begin": call.block_begin, "content": inner, "end": call.block_end}
    auto = {"type": "triggered_tags", "triggers": [call.trigger], "tags": [block],
            "stop_after_first": True}  # fmt: skip
    return _Calls("format", auto, block)


def _call_tag(call: CallFormat, tool: Tool) -> Format:
    content = _schema(tool.input_schema, call.style)
    if call.after:
        content = {"type": "sequence",
                   "elements": [content, {"type": "regex", "pattern": call.after}]}  # fmt: skip
    return {"type": "tag", "begin": call.opening(tool.name), "content": content, "end": call.end}


def _only(found: Format, own: list[Format], one: bool) -> Format:
    """Calls only, from the library's format for required or forced calls (which may allow
    text before a call, or none at all: the node's `any` and named choices do not)."""
    kind = found.get("type")
    if kind == "optional":
        return _only(found["content"], own, one)
    if kind == "triggered_tags" or own:
        return _calls_only(list(found.get("tags", ())) + own, one)
    if kind == "tags_with_separator":
        return found | {"at_least_one": True}
    return found


def _with_own(auto: Format, own: list[Format]) -> Format:
    """The auto format with the family's own free-form calls beside the library's."""
    if auto.get("type") != "triggered_tags":
        return auto
    triggers = list(auto["triggers"])
    for tag in own:
        if not any(tag["begin"].startswith(trigger) for trigger in triggers):
            triggers.append(tag["begin"])
    return auto | {"tags": [*auto["tags"], *own], "triggers": triggers}


def _calls_only(tags: list[Format], one: bool) -> Format:
    """At least one of these calls and nothing else (whitespace between them); one at most
    where `one`."""
    call = tags[0] if len(tags) == 1 else {"type": "or", "elements": tags}
    if one:
        return call
    more = {"type": "star", "content": {"type": "sequence", "elements": [BETWEEN_CALLS, call]}}
    return {"type": "sequence", "elements": [call, more]}


def _structure_tags(parser: str, functions: list[Tool]) -> list[tuple[str, Format]] | None:
    """(trigger, tag) for each tool from the detector's structure information; None where the
    detector has none."""
    detector = libraries.tool_parsers()[parser]()
    if not detector.supports_structural_tag():
        return None
    try:
        info = detector.structure_info()
        structures = [(info(tool.name), tool) for tool in functions]
    except (NotImplementedError, ValueError, AttributeError):
        return None
    return [
        (found.trigger, {"type": "tag", "begin": found.begin,
                         "content": _schema(tool.input_schema), "end": found.end})
        for found, tool in structures
    ]  # fmt: skip


def _array(request: GenerateRequest, functions: list[Tool], one: bool) -> _Calls:
    if request.tool_choice.kind is ToolChoiceKind.AUTO:
        return _Calls("format")
    libraries.check()
    from sglang.srt.entrypoints.openai.protocol import ToolChoice, ToolChoiceFuncName
    from sglang.srt.function_call.utils import get_json_schema_constraint

    choice: Any = "required"
    if request.tool_choice.kind is ToolChoiceKind.NAMED:
        choice = ToolChoice(type="function", function=ToolChoiceFuncName(name=functions[0].name))
    tools = libraries.sglang_tools(tuple(functions))
    schema = get_json_schema_constraint(tools, choice, parallel_tool_calls=not one)
    return _Calls("json_array", array=schema)


def _function(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _free_form_tag(tool: Tool, form: ModelFormat) -> Format:
    call = form.family.free_form
    assert call is not None and tool.free_form is not None
    content: Format = ANY_TEXT
    if tool.free_form.grammar is not None:
        content = {"type": "grammar", "grammar": tool.free_form.grammar}
    return {"type": "tag", "begin": call.opening(tool.name), "content": content, "end": call.end}


def _json(request: GenerateRequest) -> Format | None:
    form = request.response_format
    if form is None:
        return None
    return _schema(form.schema if form.kind == "json_schema" and form.schema else ANY_OBJECT)


def _schema(schema: dict[str, Any], style: str = "json") -> Format:
    found = {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": MAX_WHITESPACE}
    return found | ({"style": style} if style != "json" else {})


def free_form(syntax: str, definition: str, path: str) -> FreeForm:
    """A custom tool's input format: any text, or a Lark grammar or regular expression
    translated by xgrammar into its EBNF (the runtime compiles that). What xgrammar cannot
    translate is a 400 that names the format and says why."""
    if syntax == "text":
        return FreeForm()
    from xgrammar import Grammar as XGrammar

    try:
        if syntax == "lark":
            grammar = XGrammar.from_lark(definition)
        else:
            grammar = XGrammar.from_regex(definition)
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
        from xgrammar import Grammar as XGrammar
    except ImportError:
        return schemas[0][0] if len(schemas) == 1 else None
    for path, schema in schemas:
        try:
            XGrammar.from_json_schema(orjson.dumps(schema).decode())
        except (RuntimeError, ValueError):
            return path
    return None

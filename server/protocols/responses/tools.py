"""Responses `tools` and `tool_choice` -> canonical tools: functions (JSON arguments), custom
tools (free-form input: any text, or a Lark grammar or regular expression the grammar holds the
input to), and namespaces grouping both (the model writes `namespace.name`; the call comes back
as the name inside, with its namespace). OpenAI's hosted tools are refused, or left out of what
the model sees with `--compat codex`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grammars.constraints import free_form
from server.canonical import FreeForm, Tool, ToolChoice, ToolChoiceKind
from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.fields import Fields
from server.protocols.openai.decode import EMPTY_PARAMETERS, NAME
from server.protocols.rules import direct_callers, json_schema

# OpenAI's tools that run on its side: named in the refusal, so a client knows why.
HOSTED_TOOLS = (
    "web_search", "web_search_preview", "web_search_2025_08_26",
    "web_search_preview_2025_03_11", "file_search", "code_interpreter", "computer",
    "computer_use", "computer_use_preview", "mcp", "image_generation", "local_shell", "shell",
    "apply_patch", "tool_search",
)  # fmt: skip
MAX_DEFINITION = 64 * 1024  # characters of a custom tool's grammar


@dataclass(frozen=True, slots=True)
class ResponsesOptions:
    """What the node's operator set for this API (`--compat codex`)."""

    drop_hosted_tools: bool = False  # leave OpenAI's hosted tools out instead of refusing them


@dataclass(frozen=True, slots=True)
class CallTarget:
    """How a call of a tool comes back: as a function_call or a custom_tool_call, with the name
    inside its namespace."""

    name: str
    namespace: str | None = None
    custom: bool = False


def tools(
    fields: Fields, options: ResponsesOptions
) -> tuple[tuple[Tool, ...], tuple[dict[str, Any], ...]]:
    """The canonical tools, and the tools as the response repeats them."""
    found: list[Tool] = []
    wire: list[dict[str, Any]] = []
    for path, item in fields.items("tools"):
        tool = Fields(item, path)
        kind = tool.string("type", required=True)
        if kind in HOSTED_TOOLS:
            if not options.drop_hosted_tools:
                raise UnsupportedParameter(
                    f"{path}.type: {kind} is one of OpenAI's hosted tools, which this node does "
                    "not run; it takes tools of type function, custom and namespace",
                    param=f"{path}.type",
                )
            wire.append(item)  # repeated as sent; the model is not shown it
            continue
        if kind == "namespace":
            wire.append(_namespace(tool, found))
        elif kind in ("function", "custom"):
            wire.append(_tool(tool, kind, found, None))
        else:
            raise InvalidRequest(
                f"{path}.type must be function, custom or namespace", param=f"{path}.type"
            )
    _unique(found)
    return tuple(found), tuple(wire)


def _name(fields: Fields) -> str:
    name = fields.string("name", required=True)
    if not NAME.fullmatch(name):
        path = f"{fields.path}.name"
        raise InvalidRequest(
            f"{path} must be 1 to 64 letters, digits, underscores or hyphens", param=path
        )
    return name


def _namespace(fields: Fields, found: list[Tool]) -> dict[str, Any]:
    name = _name(fields)
    description = fields.string("description", required=True)
    inner = []
    for path, item in fields.items("tools", required=True):
        tool = Fields(item, path)
        kind = tool.choice("type", ("function", "custom"), required=True)
        inner.append(_tool(tool, kind, found, name))
    fields.done()
    return {"type": "namespace", "name": name, "description": description, "tools": inner}


def _tool(fields: Fields, kind: str, found: list[Tool], namespace: str | None) -> dict[str, Any]:
    path = fields.path
    name = _name(fields)
    description = fields.string("description")
    if fields.boolean("defer_loading"):
        raise UnsupportedParameter(
            f"{path}.defer_loading: true needs OpenAI's tool search, which this node does not "
            "run; send the tool without it",
            param=f"{path}.defer_loading",
        )
    direct_callers(fields)
    qualified = f"{namespace}.{name}" if namespace else name
    if kind == "custom":
        form, wire_format = _format(fields)
        fields.done()
        found.append(
            Tool(qualified, description, EMPTY_PARAMETERS, strict=True,
                 schema_path=f"{path}.format", free_form=form, namespace=namespace)
        )  # fmt: skip
        return {"type": "custom", "name": name, "description": description, "format": wire_format}
    parameters = fields.raw("parameters")
    schema = EMPTY_PARAMETERS
    if parameters is not None:
        schema = json_schema(parameters, f"{path}.parameters")
    strict = fields.boolean("strict")
    fields.object("output_schema")  # the output the client sends back, not the model's: ignored
    fields.done()
    found.append(
        Tool(qualified, description, schema, strict is not False, f"{path}.parameters",
             namespace=namespace)
    )  # fmt: skip
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": parameters,
        "strict": strict is not False,
    }


def _format(fields: Fields) -> tuple[FreeForm, dict[str, Any]]:
    form = fields.object("format")
    if form is None:
        return FreeForm(), {"type": "text"}
    kind = form.choice("type", ("text", "grammar"), required=True)
    if kind == "text":
        form.done()
        return FreeForm(), {"type": "text"}
    syntax = form.choice("syntax", ("lark", "regex"), required=True)
    definition = form.string("definition", required=True, min_length=1, max_length=MAX_DEFINITION)
    form.done()
    path = f"{form.path}.definition"
    wire = {"type": "grammar", "syntax": syntax, "definition": definition}
    return free_form(syntax, definition, path), wire


def _unique(found: list[Tool]) -> None:
    """No two tools of one namespace (or of none) have the same name."""
    seen: set[str] = set()
    for tool in found:
        if tool.name in seen:
            path = tool.schema_path.rsplit(".", 1)[0] + ".name"
            raise InvalidRequest(
                f"{path}: tool names must be unique; {tool.name} repeats", param=path
            )
        seen.add(tool.name)


def targets(found: tuple[Tool, ...]) -> dict[str, CallTarget]:
    """What each name the model may write comes back as."""
    return {
        tool.name: CallTarget(tool.local_name, tool.namespace, tool.free_form is not None)
        for tool in found
    }


def tool_choice(fields: Fields, found: tuple[Tool, ...]) -> tuple[ToolChoice, Any]:
    parallel = fields.boolean("parallel_tool_calls")
    parallel = True if parallel is None else parallel
    value = fields.raw("tool_choice")
    if value is None or value == "auto":
        return ToolChoice(ToolChoiceKind.AUTO, parallel=parallel), "auto"
    if value == "none":
        return ToolChoice(ToolChoiceKind.NONE, parallel=parallel), "none"
    if value == "required":
        if not found:
            raise InvalidRequest("tool_choice required needs tools", param="tool_choice")
        return ToolChoice(ToolChoiceKind.ANY, parallel=parallel), "required"
    if not isinstance(value, dict):
        raise InvalidRequest(
            "tool_choice must be none, auto, required, a function or a custom tool",
            param="tool_choice",
        )
    choice = Fields(value, "tool_choice")
    kind = choice.string("type", required=True)
    if kind not in ("function", "custom"):
        raise UnsupportedParameter(
            f"tool_choice.type: {kind} is not supported on this node; it takes none, auto, "
            "required, {type: function, name} or {type: custom, name}",
            param="tool_choice.type",
        )
    name = choice.string("name", required=True)
    choice.done()
    tool = _chosen(found, kind, name)
    return ToolChoice(ToolChoiceKind.NAMED, tool.name, parallel), {"type": kind, "name": name}


def _chosen(found: tuple[Tool, ...], kind: str, name: str) -> Tool:
    """The tool a choice names: by its name, or by its name inside a namespace where only one
    tool of that kind has it."""
    custom = kind == "custom"
    same_kind = [tool for tool in found if (tool.free_form is not None) == custom]
    named = [tool for tool in same_kind if tool.name == name] or [
        tool for tool in same_kind if tool.local_name == name
    ]
    if len(named) != 1:
        noun = "custom tools" if custom else "functions"
        reason = (
            f"is not one of the {noun} in tools"
            if not named
            else (f"names {noun} in more than one namespace; name one as namespace.name")
        )
        raise InvalidRequest(f"tool_choice.name: {name} {reason}", param="tool_choice.name")
    return named[0]

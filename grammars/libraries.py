"""The library pieces that define a model's format: SGLang's tool-call detectors
(`FunctionCallParser`), its reasoning parsers and template detection, and xgrammar's model
structural tags. Imported here only, lazily (SGLang's parsers import its OpenAI protocol and
transformers), and checked once against the release this node is built on."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from server.canonical import Tool

if TYPE_CHECKING:
    from sglang.srt.entrypoints.openai.protocol import Tool as SGLangTool
    from sglang.srt.function_call.base_format_detector import BaseFormatDetector
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

# The xgrammar release whose structural tags the family files name; SGLang's is the engine's pin.
XGRAMMAR = "0.2.7"


class LibraryMismatch(RuntimeError):
    """SGLang or xgrammar is not the release the families are written against."""


@functools.cache
def _checked() -> None:
    from server.engines.sglang.pins import SGLANG, release

    for name, wanted in (("sglang", SGLANG), ("xgrammar", XGRAMMAR)):
        found = release(name)
        if found != wanted:
            raise LibraryMismatch(
                f"{name} "
                + (f"{found} is installed, where this node is built on {wanted}"
                   if found else "is not installed")
                + " (make install sets up the pinned ones)"
            )  # fmt: skip
    from server.torch_compat import ensure_torchvision_loadable

    ensure_torchvision_loadable()  # SGLang's parsers import transformers, which imports it


def check() -> None:
    """Raises LibraryMismatch unless the pinned releases are installed."""
    _checked()


def tool_parsers() -> dict[str, type[BaseFormatDetector]]:
    """SGLang's tool-call parser names, each with its detector class (aliases share one)."""
    _checked()
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    return dict(FunctionCallParser.ToolCallParserEnum)


def reasoning_parsers() -> frozenset[str]:
    _checked()
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    return frozenset(ReasoningParser.DetectorMap)


def sglang_tools(tools: tuple[Tool, ...]) -> list[SGLangTool]:
    """The request's tools as SGLang's parsers take them (OpenAI's function shape). A free-form
    tool is a function of one string parameter, `input`."""
    _checked()
    from sglang.srt.entrypoints.openai.protocol import Function
    from sglang.srt.entrypoints.openai.protocol import Tool as SGLangTool

    return [
        SGLangTool(
            type="function",
            function=Function(
                name=tool.name,
                description=tool.description,
                parameters=FREE_FORM_SCHEMA if tool.free_form is not None else tool.input_schema,
                strict=True,
            ),
        )
        for tool in tools
    ]


# The one parameter a free-form tool's call has where a format knows only functions.
FREE_FORM_INPUT = "input"
FREE_FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {FREE_FORM_INPUT: {"type": "string"}},
    "required": [FREE_FORM_INPUT],
}


def function_call_parser(
    name: str, tools: list[SGLangTool], tokenizer: Any = None
) -> FunctionCallParser:
    """`tokenizer`: given to the detectors that read the vocabulary (Hunyuan's markers)."""
    _checked()
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    return FunctionCallParser(tools, name, tokenizer=tokenizer)


def json_array_parser() -> BaseFormatDetector:
    """SGLang's reader of the JSON array of calls its own required-call grammar makes a model
    write where the format has no grammar of its own."""
    _checked()
    from sglang.srt.function_call.json_array_parser import JsonArrayParser

    return JsonArrayParser()


def reasoning_parser(
    name: str, opened: bool, tools_follow: bool, tokenizer: Any = None
) -> ReasoningParser:
    """`opened`: the prompt ends inside the reasoning."""
    _checked()
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    return ReasoningParser(
        name,
        stream_reasoning=True,
        force_reasoning=opened,
        tool_call_parser_active=tools_follow,
        tokenizer=tokenizer,
    )

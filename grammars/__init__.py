"""Model families as data: one TOML file per chat format (`chatml.toml`, `qwen3_coder.toml`, ...),
chosen from the model's own chat template: how tools reach the prompt, the tool-call format the
model writes (which the grammar enforces and the output parser reads), how results go back, how
reasoning is switched. Adding a family is adding a file.

Where the template presents the tools itself (`template_tools`), the prompt is what it renders
from the tools, the calls and the results. Where it renders calls and results but not the tools
(`template_calls`: DeepSeek V3.1's), the node presents them as the model's card documents. Where
it knows no tools at all (ChatML's), the node adds the instructions of the format it teaches and
writes calls and results in it."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

FOLDER = Path(__file__).parent
# A chat template that reads the request's tools (in a statement or an expression, not in a
# comment or its text) presents them in a format of its own.
_CODE = re.compile(r"\{[{%](.*?)[}%]\}", re.DOTALL)
_TOOLS = re.compile(r"\btools\b")


def reads_tools(template: str) -> bool:
    return any(_TOOLS.search(code) for code in _CODE.findall(template))


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """A call is call_begin + name + arguments_begin + the arguments + call_end, exactly: the
    grammar makes the model write it so, the parser reads it so, history renders it so. The
    arguments are a JSON object (`json`) or Qwen's XML parameters (`qwen_xml`,
    `<parameter=KEY>\\nVALUE\\n</parameter>\\n` each, xgrammar's style of that name)."""

    trigger: str
    call_begin: str
    arguments_begin: str
    call_end: str
    separator: str
    arguments: Literal["json", "qwen_xml"] = "json"
    parallel: bool = True  # False: the format holds one call a turn
    # The calls of one answer inside one block (DeepSeek's, Mistral's array): block_begin, the
    # calls with the separator between them, block_end. The trigger is then block_begin.
    block_begin: str = ""
    block_end: str = ""
    arguments_text: bool = False  # the template takes a call's arguments as JSON text
    # How the node presents each tool in `system`: "{json}" (the tool's JSON object), or
    # "{name}", "{description}" and "{parameters}" (its schema's JSON); between tools.
    tool_entry: str = "{json}"
    tool_separator: str = "\n"
    # What a template-less family adds: the tool instructions, where results go.
    system: str = ""  # appended to the system prompt; "{tools}" is replaced by the tool lines
    result_role: str = "user"
    result: str = "{content}"  # "{content}" is replaced by the result's text
    error_prefix: str = "Error: "
    # A free-form tool's call in a template-less family: call_begin + name + input_begin + the
    # input as it is + input_end. In an XML family it is one `input` parameter, its text as is.
    input_begin: str = ""
    input_end: str = ""
    free_form_system: str = ""  # follows `system` when a request has free-form tools

    @property
    def free_form(self) -> bool:
        """The format has a call of free-form input (OpenAI's custom tools)."""
        return bool(self.input_begin)

    @property
    def tail(self) -> str:
        """What follows the arguments, once whitespace after them is read."""
        return self.call_end.lstrip()

    def call(self, name: str, arguments: str, free_form: bool = False) -> str:
        if free_form:
            return self.call_begin + name + self.input_begin + arguments + self.input_end
        return self.call_begin + name + self.arguments_begin + arguments + self.call_end


@dataclass(frozen=True, slots=True)
class ThinkingFormat:
    open: str  # ends the answer's prompt when the model is to reason first
    close: str
    after: str  # between the reasoning and the answer
    # The template's own switch (a keyword it reads, true to reason); "": the node opens the
    # reasoning by ending the prompt with `open`.
    switch: str = ""

    def block(self, text: str) -> str:
        """Reasoning of an earlier turn, as it goes back into the prompt."""
        return self.open + text + "\n" + self.close + self.after


@dataclass(frozen=True, slots=True)
class ModelFamily:
    name: str
    match: tuple[str, ...] = ()  # all in the chat template
    template_tools: bool = False
    # The template renders calls and results from OpenAI-shaped messages (`tool_calls`, role
    # "tool"); implied by template_tools.
    template_calls: bool = False
    tool_format: str | None = None  # its name as SGLang's tool-call parsers call it
    system_anywhere: bool = False
    tools: ToolFormat | None = None  # None: the family has no tool-call format
    thinking: ThinkingFormat | None = None  # None: the family has no reasoning phase
    image: str | None = None  # where an image stands in a prompt; None: no vision format
    special_tokens: bool = False  # its markup is in special tokens: they are output as text
    # The markup a text (or JSON) answer opens with: Harmony's final channel. Where it is set,
    # every answer is constrained: it opens so, or it is calls.
    answer_begin: str = ""


# A chat template no file matches, that reads no tools: chat only, nothing assumed.
UNKNOWN = ModelFamily("unknown")


class UnknownFormat(ValueError):
    """The chat template presents tools in a format no family here knows."""


def _family(data: dict[str, Any]) -> ModelFamily:
    tools, thinking = data.get("tools"), data.get("thinking")
    return ModelFamily(
        name=data["name"],
        match=tuple(data.get("match", ())),
        template_tools=bool(data.get("template_tools", False)),
        template_calls=bool(data.get("template_calls", data.get("template_tools", False))),
        tool_format=data.get("tool_format"),
        system_anywhere=bool(data.get("system_anywhere", False)),
        tools=ToolFormat(**tools) if tools else None,
        thinking=ThinkingFormat(**thinking) if thinking else None,
        image=data.get("image"),
        special_tokens=bool(data.get("special_tokens", False)),
        answer_begin=data.get("answer_begin", ""),
    )


def families() -> list[ModelFamily]:
    return [_family(tomllib.loads(p.read_text())) for p in sorted(FOLDER.glob("*.toml"))]


def family(name: str) -> ModelFamily:
    return next(found for found in families() if found.name == name)


def family_for(chat_template: str | None) -> ModelFamily:
    """The family whose markers are all in the template, the most specific first. A template that
    reads tools is served only by a family whose template presents them; one in no known format
    raises UnknownFormat, naming what it found."""
    template = chat_template or ""
    presents = reads_tools(template)
    matching = [
        found
        for found in families()
        if found.match
        and all(marker in template for marker in found.match)
        and found.template_tools == presents
    ]
    if matching:
        return max(matching, key=lambda found: len(found.match))
    if not presents:
        return UNKNOWN
    markers = sorted(
        {marker for found in families() for marker in found.match if marker in template}
    )
    seen = ", ".join(markers) if markers else "none of the families' markers"
    known = ", ".join(
        f"{found.name} ({found.tool_format})" for found in families() if found.template_tools
    )
    raise UnknownFormat(
        f"the chat template presents tools in a format this node does not know (found: {seen}); "
        f"known tool formats: {known}. Add a family file to grammars/ for it"
    )

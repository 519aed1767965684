"""A model family as data (`families/*.toml`, one file a tool-call format): the SGLang parsers that
read its output and the xgrammar structural tag that constrains it, by name, and what the node
must know beside them to render a conversation in the model's own template."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

FOLDER = Path(__file__).parent / "families"


@dataclass(frozen=True, slots=True)
class FreeFormCall:
    """A call of free-form input (OpenAI's custom tools), written where no library has one:
    `begin` (with the tool's `{name}`), the input as it is, `end`."""

    begin: str
    end: str

    def opening(self, name: str) -> str:
        return self.begin.replace("{name}", name)


@dataclass(frozen=True, slots=True)
class CallFormat:
    """A call written where neither library writes it as the model's template does: `begin`
    (with the tool's `{name}`), its arguments (JSON, or xgrammar's JSON `style` of that name),
    what follows them inside the call (`after`, a regular expression: Mistral's call id), `end`.
    The calls of one answer are joined by `separator`, inside `block_begin` and `block_end`
    where the format has a block; `trigger` opens the block, or a call, in free text."""

    begin: str
    end: str
    trigger: str
    separator: str = ""
    block_begin: str = ""
    block_end: str = ""
    style: str = "json"
    after: str = ""

    def opening(self, name: str) -> str:
        return self.begin.replace("{name}", name)


@dataclass(frozen=True, slots=True)
class TaughtTools:
    """What the node writes for a template that knows no tools: the instructions after the
    system prompt (`{tools}`: one JSON object a tool), and how results go back. Calls themselves
    are written as the family's structural tag has them."""

    system: str
    free_form_system: str = ""  # follows `system` when a request has free-form tools
    separator: str = "\n"  # between the calls of one turn
    result_role: str = "user"
    result: str = "{content}"  # each result, wrapped; consecutive results share one turn


@dataclass(frozen=True, slots=True)
class ModelFamily:
    name: str
    # SGLang's tool-call parser (its FunctionCallParser name), which reads the calls; None: the
    # family has no tool calls.
    tool_parser: str | None = None
    # xgrammar's model structural tag (`get_model_structural_tag`) for the calls; None: the tags
    # come from the detector's own structure information.
    structural_tag: str | None = None
    # SGLang's reasoning parser; None: the one SGLang's template detection names, if any.
    reasoning_parser: str | None = None
    models: str = ""  # the models that write it, for people
    # Markers that are all in the template of such a model, for formats SGLang's template
    # detection does not name.
    match: tuple[str, ...] = ()
    # SGLang parsers its template detection names for such a template by mistake (its rules
    # match another format's text too): the family's markers take precedence over them.
    corrects: tuple[str, ...] = ()
    # How tools reach the prompt: the template presents them ("template"); it renders calls and
    # results but the node presents the tools ("system"); the node writes all of it ("node").
    tools_by: Literal["template", "system", "node"] = "template"
    # The tools as the template takes them: OpenAI's {"type": "function", "function": {...}}, or
    # the function objects alone.
    tools_as: Literal["openai", "function"] = "openai"
    # The template reads every tool's description: one without is given an empty one.
    described: bool = False
    # A call's arguments, as the template takes them: an object, or its JSON text.
    arguments: Literal["object", "text"] = "object"
    # The ids of calls, as the template writes them into the prompt ("{name}", "{index}"); "":
    # the client's own.
    call_id: str = ""
    one_call: bool = False  # the format holds one call a turn
    # SGLang's streaming detector reads this format's calls as its whole reading does; False:
    # it does not (it fails on some values), so the calls are read from the whole answer and go
    # out when it ends.
    streams_calls: bool = True
    system_anywhere: bool = False  # a system turn may stand past the first
    image: str | None = None  # where an image stands in a prompt; None: no vision format
    special_tokens: bool = False  # its markup is in special tokens: they are output as text
    # After the reasoning's close, before the answer (what the grammar writes there).
    thinking_after: str = ""
    # The markup a text (or JSON) answer opens with where it does not reason: Harmony's final
    # channel. Where it is set, every answer is constrained: it opens so, or it is calls.
    answer_begin: str = ""
    error_prefix: str = "Error: "  # before an error result's text
    # The template wants every assistant turn's reasoning: an empty one where there is none.
    history_reasoning: bool = False
    free_form: FreeFormCall | None = None
    taught: TaughtTools | None = None
    # The calls as the template writes them, where neither library's structure does (or as
    # SGLang's detector reads them, where it cannot read the template's).
    call: CallFormat | None = None
    # What the prompt ends with, which SGLang's detector reads the answer's first message on
    # from (Harmony's `<|start|>assistant`).
    reads_after: str = ""
    # The tool presentation of `tools_by = "system"`: each tool ("{name}", "{description}",
    # "{parameters}") between `tool_separator`s, in `system` at "{tools}".
    tool_entry: str = ""
    tool_separator: str = "\n"
    system: str = ""

    @property
    def has_tools(self) -> bool:
        return self.tool_parser is not None


# A chat template no file matches, that reads no tools: chat only, nothing assumed.
UNKNOWN = ModelFamily("unknown")


def _family(data: dict[str, Any]) -> ModelFamily:
    fields = dict(data)
    fields["match"] = tuple(fields.get("match", ()))
    fields["corrects"] = tuple(fields.get("corrects", ()))
    if "free_form" in fields:
        fields["free_form"] = FreeFormCall(**fields["free_form"])
    if "call" in fields:
        fields["call"] = CallFormat(**fields["call"])
    if "taught" in fields:
        fields["taught"] = TaughtTools(**fields["taught"])
    return ModelFamily(**fields)


def families() -> tuple[ModelFamily, ...]:
    return tuple(_family(tomllib.loads(p.read_text())) for p in sorted(FOLDER.glob("*.toml")))


def family(name: str) -> ModelFamily:
    return next(found for found in families() if found.name == name)

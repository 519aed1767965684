"""Model families as data: one TOML file per chat format (`chatml.toml`, ...), matched on the
model's chat template: how tools are presented, the tool-call format the model writes (which the
grammar enforces and the output parser reads), how results go back. Adding a family is adding a
file."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).parent


@dataclass(frozen=True, slots=True)
class ToolFormat:
    system: str  # appended to the system prompt; "{tools}" is replaced by the tool lines
    trigger: str
    call_begin: str
    arguments_begin: str
    call_end: str
    separator: str
    result_role: str
    result: str  # "{content}" is replaced by the result's text
    error_prefix: str
    # A free-form tool's call: call_begin + name + input_begin + the input as it is + input_end.
    input_begin: str
    input_end: str
    free_form_system: str  # follows `system` when a request has free-form tools

    def call(self, name: str, arguments: str, free_form: bool = False) -> str:
        if free_form:
            return self.call_begin + name + self.input_begin + arguments + self.input_end
        return self.call_begin + name + self.arguments_begin + arguments + self.call_end


@dataclass(frozen=True, slots=True)
class ThinkingFormat:
    open: str  # ends the answer's prompt when the model is to reason first
    close: str
    after: str  # between the reasoning and the answer

    def block(self, text: str) -> str:
        """Reasoning of an earlier turn, as it goes back into the prompt."""
        return self.open + text + "\n" + self.close + self.after


@dataclass(frozen=True, slots=True)
class ModelFamily:
    name: str
    match: tuple[str, ...] = ()
    system_anywhere: bool = False
    tools: ToolFormat | None = None  # None: the family has no tool-call format
    thinking: ThinkingFormat | None = None  # None: the family has no reasoning phase
    image: str | None = None  # where an image stands in a prompt; None: no vision format


# A chat template no file matches: nothing is assumed about it.
UNKNOWN = ModelFamily("unknown")


def _family(data: dict[str, Any]) -> ModelFamily:
    tools, thinking = data.get("tools"), data.get("thinking")
    return ModelFamily(
        name=data["name"],
        match=tuple(data.get("match", ())),
        system_anywhere=bool(data.get("system_anywhere", False)),
        tools=ToolFormat(**tools) if tools else None,
        thinking=ThinkingFormat(**thinking) if thinking else None,
        image=data.get("image"),
    )


def families() -> list[ModelFamily]:
    return [_family(tomllib.loads(p.read_text())) for p in sorted(FOLDER.glob("*.toml"))]


def family_for(chat_template: str | None) -> ModelFamily:
    for family in families():
        if chat_template and any(marker in chat_template for marker in family.match):
            return family
    return UNKNOWN

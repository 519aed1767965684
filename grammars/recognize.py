"""Which format a model speaks, from its own chat template and vocabulary: SGLang's template
detection names the tool-call and reasoning parsers where its rules know the template; the
families' markers decide where they do not. A template that reads tools in no known format stops
the start."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from grammars import libraries
from grammars.family import UNKNOWN, ModelFamily, families

# A chat template that reads the request's tools (in a statement or an expression, not in a
# comment or its text) presents them in a format of its own.
_CODE = re.compile(r"\{[{%](.*?)[}%]\}", re.DOTALL)
_TOOLS = re.compile(r"\btools\b")


def reads_tools(template: str) -> bool:
    return any(_TOOLS.search(code) for code in _CODE.findall(template))


class UnknownFormat(ValueError):
    """The chat template presents tools in a format no family here knows."""


@dataclass(frozen=True, slots=True)
class Reasoning:
    """The model's reasoning phase, as SGLang's reasoning parser reads it."""

    parser: str  # SGLang's reasoning parser name
    open: str  # the parser's opening tag (the model's, or the prompt's end)
    close: str
    after: str  # what the grammar writes between the close and the answer
    switch: str | None = None  # the template's keyword that turns it on (enable_thinking, ...)


@dataclass(frozen=True, slots=True)
class ModelFormat:
    """A model's format as served: its family, its reasoning (None: it has none), and the
    markup its vocabulary holds whole (tokens the runtime never splits)."""

    family: ModelFamily
    reasoning: Reasoning | None = None
    markup: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.family.name


class _Vocabulary:
    """What SGLang's detection reads of a tokenizer."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self._tokens = {token: index for index, token in enumerate(tokens)}

    def get_vocab(self) -> dict[str, int]:
        return self._tokens


def format_of(tokenizer: Any) -> ModelFormat:
    """The format of the model a Hugging Face tokenizer is of (its template, its vocabulary)."""
    return format_for(tokenizer.chat_template, tokenizer.get_vocab(), tokenizer.get_added_vocab())


def format_for(
    chat_template: str | None, vocabulary: Iterable[str] = (), markup: Iterable[str] = ()
) -> ModelFormat:
    """`vocabulary`: the tokenizer's tokens (some of SGLang's rules read them); `markup`: its
    added tokens."""
    template = chat_template or ""
    family, reasoning_parser, switch = _detect(template, _Vocabulary(vocabulary))
    reasoning = None
    parser = family.reasoning_parser or reasoning_parser
    if parser is not None:
        detector = libraries.reasoning_parser(parser, opened=True, tools_follow=False).detector
        reasoning = Reasoning(
            parser,
            detector.think_start_token,
            detector.think_end_token,
            family.thinking_after,
            switch,
        )
    return ModelFormat(family, reasoning, tuple(sorted(set(markup), key=len, reverse=True)))


def _detect(template: str, vocabulary: _Vocabulary) -> tuple[ModelFamily, str | None, str | None]:
    """The family, SGLang's reasoning parser for the template, and the template's switch."""
    libraries.check()
    from sglang.srt.parser.template_detection import (
        detect_reasoning_parser,
        detect_reasoning_pattern,
        detect_tool_call_parser,
    )

    if not template:
        return UNKNOWN, None, None
    force, toggle = detect_reasoning_pattern(template)
    switch = toggle.toggle_param if toggle is not None else None
    reasoning = detect_reasoning_parser(template, vocabulary, toggle, force)
    presents = reads_tools(template)
    known = tuple(found for found in families() if found.tools_by != "template" or presents)
    detected = detect_tool_call_parser(template, vocabulary, toggle, force)
    found = _by_parser(detected, known) if detected else None
    marked = _by_markers(template, known, taught=False)
    if found is None or (marked is not None and detected in marked.corrects):
        found = marked
    if found is not None:
        return found, reasoning, switch
    if presents:
        raise UnknownFormat(_unknown(template, detected, known))
    return _by_markers(template, known, taught=True) or UNKNOWN, reasoning, switch


def _by_parser(name: str, known: tuple[ModelFamily, ...]) -> ModelFamily | None:
    """The template family whose tool parser is SGLang's detector of that name (or its alias)."""
    parsers = libraries.tool_parsers()
    detector = parsers.get(name)
    for found in known:
        parser = found.tool_parser
        if found.taught is None and parser in parsers and parsers[parser] is detector:
            return found
    return None


def _by_markers(template: str, known: tuple[ModelFamily, ...], taught: bool) -> ModelFamily | None:
    matching = [
        found
        for found in known
        if found.match
        and (found.taught is not None) == taught
        and all(marker in template for marker in found.match)
    ]
    return max(matching, key=lambda found: len(found.match)) if matching else None


def _unknown(template: str, detected: str | None, known: tuple[ModelFamily, ...]) -> str:
    markers = sorted({marker for found in known for marker in found.match if marker in template})
    seen = ", ".join(markers) if markers else "none of the families' markers"
    if detected:
        seen += f"; SGLang's detection names the {detected} parser, which no family here serves"
    names = ", ".join(
        f"{found.name} ({found.tool_parser})" for found in known if found.taught is None
    )
    return (
        f"the chat template presents tools in a format this node does not know (found: {seen}); "
        f"known tool formats: {names}. Add a family file to grammars/families/ for it"
    )


def describe(found: ModelFormat) -> dict[str, Any]:
    """What /models says of the format: the family, SGLang's tool-call and reasoning parsers."""
    return {
        "family": found.family.name,
        "tool_format": found.family.tool_parser,
        "reasoning": found.reasoning is not None,
        "reasoning_parser": found.reasoning.parser if found.reasoning else None,
    }

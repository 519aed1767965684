"""One published template's format, ready to check without a model: its tokenizer, the format
the node recognises, its renderer, and the calls of an answer as the template writes them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from grammars import ModelFormat, format_of, libraries
from grammars.constraints import Grammar, constraint_for
from grammars.prompt import PromptRenderer
from grammars.reading import Reader
from server.canonical import (
    GenerateRequest,
    Message,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
)
from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.tokenizer import load_tokenizer
from tests.families.published import Published, published, tokenizer_folder


@dataclass(frozen=True)
class Format:
    entry: Published
    tokenizer: Any
    form: ModelFormat
    renderer: PromptRenderer

    def answer(self, calls: list[tuple[str, dict[str, Any]]], tools: tuple[Tool, ...]) -> str:
        """The text a model writes for these calls: the template's rendering of an assistant
        turn that makes them (a turn after it), from where the prompt that asks for it leaves
        the model, up to the turn's end."""
        ask = (Message("user", (Text(ASK),)),)
        made = tuple(
            ToolCall(f"call{index:05d}", name, json.dumps(arguments, ensure_ascii=False))
            for index, (name, arguments) in enumerate(calls)
        )
        prompt = self.renderer.render(GenerateRequest("m", ask, tools=tools)).text
        history = self._history(ask, Message("assistant", made), tools)
        opening = prompt[prompt.rindex(ASK) + len(ASK) :]  # the generation prompt
        turn = history[history.rindex(ASK) + len(ASK) :]
        common = 0
        while common < min(len(opening), len(turn)) and opening[common] == turn[common]:
            common += 1
        if common < len(opening):  # the history's turn differs (a reasoning block left out)
            ends = [turn.rfind("\n", 0, common) + 1] + [
                at + len(token)
                for token in self.form.markup
                if (at := turn.rfind(token, 0, common)) >= 0
            ]
            common = max(ends)
        text = _without_turn_end(turn[common:], self.entry, self.form)
        if self.entry.call_from:
            text = text[text.index(self.entry.call_from) :]
        if self.entry.call_to:
            text = text[: text.index(self.entry.call_to)]
        return _without_reasoning(text, self.form)

    def prepared(self, tools: tuple[Tool, ...], choice: ToolChoice) -> tuple[Grammar, Reader, str]:
        """As the node prepares a request asking for calls: its grammar, the reader of its
        answer, and what the answer writes before its calls (the reasoning the template opens,
        closed at once)."""
        request = GenerateRequest("m", (Message("user", (Text(ASK),)),), tools=tools,
                                  tool_choice=choice)  # fmt: skip
        prompt = self.renderer.render(request)
        reasoning = self.renderer.reasoning_for(request, prompt)
        grammar = constraint_for(request, self.form, reasoning, prompt.opened)
        reader = Reader(
            self.form, tools, lambda: "id", reasons=reasoning is not None, opened=prompt.opened,
            calls=grammar.calls, tokenizer=self.tokenizer,
        )  # fmt: skip
        before = reasoning.close + reasoning.after if reasoning is not None else ""
        return grammar, reader, before

    def _history(self, ask: tuple[Message, ...], turn: Message, tools: tuple[Tool, ...]) -> str:
        """The conversation with the turn, followed by a user turn, or (for a template that
        wants results after calls) by the calls' results."""
        after = Message("user", (Text(AFTER),))
        try:
            return self.renderer.render(GenerateRequest("m", (*ask, turn, after), tools=tools)).text
        except Exception:  # the template's own raise_exception: results first
            results = tuple(
                ToolResult(part.id, (Text(AFTER),)) for part in turn.parts
                if isinstance(part, ToolCall)
            )  # fmt: skip
            conversation = (*ask, turn, Message("tool", results))
            return self.renderer.render(GenerateRequest("m", conversation, tools=tools)).text


ASK = "Go on, then."
AFTER = "Thanks, and what next?"


def _without_reasoning(text: str, form: ModelFormat) -> str:
    """The calls of a turn without the (empty) reasoning block a template writes before them."""
    reasoning = form.reasoning
    if reasoning is None:
        return text
    end = text.find(reasoning.close)
    if end >= 0 and not text[:end].replace(reasoning.open, "").strip():
        return text[end + len(reasoning.close) :]
    return text


def _without_turn_end(text: str, entry: Published, form: ModelFormat) -> str:
    """The turn's text without what ends it (its end-of-turn token and what follows)."""
    ends = [end for end in (entry.eos, AFTER, *_turn_ends(form)) if end]
    cut = min((at for end in ends if (at := text.find(end)) >= 0), default=len(text))
    return text[:cut].rstrip()


def _turn_ends(form: ModelFormat) -> tuple[str, ...]:
    return tuple(token for token in form.markup if token in TURN_ENDS)


# Tokens that end a model's turn in the published formats (the template writes them after it).
TURN_ENDS = frozenset(
    {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|eot|>", "</s>", "<|end|>", "<|return|>",
     "<｜end▁of▁sentence｜>", "<|endoftext|>", "<|user|>", "<|observation|>", "<end_of_turn>",
     "<turn|>", "<|assistant_end|>", "<|start|>", "<|user_start|>", "[TOOL_RESULTS]", "[INST]"}
)  # fmt: skip


@cache
def prepared(index: int) -> Format:
    entry = published()[index]
    cache_dir = default_cache_dir()
    folder = cache_dir / "test-formats" / entry.file.removesuffix(".jinja")
    embedded = ensure_converted(cache_dir)
    tokenizer = load_tokenizer(str(tokenizer_folder(entry, folder, embedded)))
    form = format_of(tokenizer)
    return Format(entry, tokenizer, form, PromptRenderer(tokenizer, form))


def sglang_reads(
    form: ModelFormat, tools: tuple[Tool, ...], text: str, tokenizer: Any = None
) -> list[tuple[str, Any]]:
    """The calls SGLang reads in an answer, as its server reads a whole one: its reasoning
    parser first where the format frames every answer in it (Harmony), then the family's tool
    detector, from the prompt's end where the detector reads on from it."""
    family = form.family
    assert family.tool_parser is not None
    if family.answer_begin and form.reasoning is not None:
        parser = libraries.reasoning_parser(form.reasoning.parser, opened=False, tools_follow=True)
        _, text = parser.parse_non_stream(text)
    detector = libraries.function_call_parser(
        family.tool_parser, libraries.sglang_tools(tools), tokenizer
    ).detector
    tools_read = libraries.sglang_tools(tools)
    read = detector.detect_and_parse(family.reads_after + (text or ""), tools_read)
    return [(call.name, json.loads(call.parameters)) for call in read.calls]


def sglang_streams(
    form: ModelFormat, tools: tuple[Tool, ...], pieces: list[str], tokenizer: Any = None
) -> list[tuple[str, Any]]:
    """The calls SGLang reads in an answer that arrives in `pieces`, as its server streams one:
    each piece through the FunctionCallParser's `parse_stream_chunk` (after the reasoning
    parser's, where the format frames every answer in it), then `parse_stream_end`; a call is
    its name and its argument fragments joined."""
    family = form.family
    assert family.tool_parser is not None
    tools_read = libraries.sglang_tools(tools)
    parser = libraries.function_call_parser(family.tool_parser, tools_read, tokenizer)
    reasoning = None
    if family.answer_begin and form.reasoning is not None:
        reasoning = libraries.reasoning_parser(form.reasoning.parser, False, True)
    calls: dict[int, list[str]] = {}
    items = parser.parse_stream_chunk(family.reads_after)[1] if family.reads_after else []
    for piece in pieces:
        if reasoning is not None:
            piece = reasoning.parse_stream_chunk(piece)[1] or ""
        items += parser.parse_stream_chunk(piece)[1]
    items += parser.parse_stream_end()[1]
    for item in items:
        if item.name:
            calls[item.tool_index] = [item.name, ""]
        if item.parameters and item.tool_index in calls:
            calls[item.tool_index][1] += item.parameters
    return [(name, json.loads(arguments or "{}")) for name, arguments in calls.values()]

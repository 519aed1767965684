"""Prompt rendering: canonical messages through the model's own chat template into token ids, in
this process, so counts are exact before the engine runs (count_tokens, context checks, usage).

Where the template presents tools (`tools_by = "template"`), the prompt is what it renders from
the tools, the calls and the results, given as OpenAI-shaped messages. Where it renders calls and
results but not the tools ("system": DeepSeek V3.1's), the node presents them as the model's card
documents. Where it knows no tools ("node": ChatML's), the node adds the instructions of the
format it teaches and writes calls as the family's structural tag has them."""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import orjson

from grammars.family import ModelFamily, TaughtTools
from grammars.libraries import FREE_FORM_INPUT
from grammars.recognize import ModelFormat, Reasoning
from server.canonical import (
    GenerateRequest,
    Image,
    Message,
    Text,
    Thinking,
    ThinkingMode,
    Tool,
    ToolCall,
    ToolReference,
    ToolResult,
)
from server.tokenizer import Prompt, Tokenizer


class PromptRenderer:
    def __init__(self, tokenizer: Tokenizer, form: ModelFormat) -> None:
        self.tokenizer = tokenizer
        self.format = form
        self.family = form.family

    def render(self, request: GenerateRequest) -> Prompt:
        """A trailing assistant turn is left open: the answer continues where it ends. The
        template's own switch turns the reasoning on or off; where the answer is to reason and the
        template has not opened the reasoning, the prompt ends with its opening tag. `opened`
        says the prompt ends inside it."""
        continues = request.continues_answer
        reasoning = self.format.reasoning
        options: dict[str, Any] = {}
        if reasoning is not None and reasoning.switch:
            options[reasoning.switch] = self.requested(request) is not None
        family = self.family
        if family.tools_by == "node":
            turns = self._taught_turns(request)
        else:
            turns = self._template_turns(request)
            listed = tuple(tool for tool in request.tools if not tool.deferred)
            if listed and family.tools_by == "template":
                shown = [_template_tool(tool) for tool in listed]
                if family.described:
                    for tool in shown:
                        tool["function"].setdefault("description", "")
                if family.tools_as == "function":
                    shown = [tool["function"] for tool in shown]
                options["tools"] = shown
            elif listed:
                _present_tools(turns, listed, family)
        text = self.tokenizer.apply_chat_template(
            turns,
            tokenize=False,
            add_generation_prompt=not continues,
            continue_final_message=continues,
            **options,
        )
        opened = not continues and reasoning is not None and _ends_inside(text, reasoning)
        if not opened and self.requested(request) is not None:
            assert reasoning is not None
            text += reasoning.open  # the answer opens inside its reasoning
            opened = True
        return Prompt(text, self.tokenizer.encode(text, add_special_tokens=False), opened)

    def requested(self, request: GenerateRequest) -> Reasoning | None:
        """The reasoning format when the request asks for it (not when the answer continues a
        trailing assistant turn: that answer has already begun)."""
        if request.thinking.mode is ThinkingMode.DISABLED or request.continues_answer:
            return None
        return self.format.reasoning

    def reasoning_for(self, request: GenerateRequest, prompt: Prompt) -> Reasoning | None:
        """The reasoning the answer has: asked for, or opened by the template whatever asked."""
        return self.requested(request) or (self.format.reasoning if prompt.opened else None)

    def _template_turns(self, request: GenerateRequest) -> list[dict[str, Any]]:
        """The conversation as chat templates read it (OpenAI's shape: `tool_calls` with their
        arguments, one role "tool" message per result, `reasoning_content`): the template renders
        them in its own format."""
        family = self.family
        turns: list[dict[str, Any]] = []
        loaded = {tool.name: tool for tool in request.tools if tool.deferred}
        ids = _CallIds(family)
        for message in request.messages:
            turn: dict[str, Any]
            if message.role == "tool":
                for part in message.parts:
                    if isinstance(part, ToolResult):
                        text = _result_text(part, family.image, loaded)
                        content = family.error_prefix + text if part.is_error else text
                        turn = {"role": "tool", "tool_call_id": ids.of(part.tool_call_id),
                                "content": content}  # fmt: skip
                        name = ids.name_of(part.tool_call_id)
                        if name is not None:  # gpt-oss's and Llama's templates name the tool
                            turn["name"] = name
                        turns.append(turn)
                continue
            turn = {
                "role": message.role,
                "content": _content(message, family.image),
            }
            calls = [part for part in message.parts if isinstance(part, ToolCall)]
            if calls and family.has_tools:
                turn["tool_calls"] = [
                    _template_call(call, ids.new(call), family.arguments == "text")
                    for call in calls
                ]
            reasoning = [part.text for part in message.parts if isinstance(part, Thinking)]
            if reasoning or (message.role == "assistant" and family.history_reasoning):
                # the key Qwen's and DeepSeek's templates read, and gpt-oss's
                turn["reasoning_content"] = turn["thinking"] = "".join(reasoning)
            turns.append(turn)
        return turns

    def _taught_turns(self, request: GenerateRequest) -> list[dict[str, Any]]:
        family = self.family
        taught = family.taught
        turns: list[dict[str, Any]] = []
        results: dict[str, Any] | None = None  # the turn tool results are being added to
        current = _current_turn_start(request.messages)
        loaded = {tool.name: tool for tool in request.tools if tool.deferred}
        for index, message in enumerate(request.messages):
            if message.role == "tool" and taught is not None:
                text = _results(message, taught, family, loaded)
                if results is None:
                    results = {"role": taught.result_role, "content": text}
                    turns.append(results)
                else:  # consecutive results share one turn
                    results["content"] += "\n" + text
                continue
            results = None
            content = _content(message, family.image)
            calls = [part for part in message.parts if isinstance(part, ToolCall)]
            if calls and taught is not None:
                written = taught.separator.join(taught_call(family, call) for call in calls)
                content = f"{content}\n{written}" if content else written
            if message.role == "assistant" and index >= current:
                content = self._reasoning(message) + content
            turns.append({"role": message.role, "content": content})
        listed = tuple(tool for tool in request.tools if not tool.deferred)
        if listed and taught is not None:
            _teach_tools(turns, listed, taught)
        return turns

    def _reasoning(self, message: Message) -> str:
        """Reasoning of the current turn goes back with it (a tool loop continues from it)."""
        reasoning = self.format.reasoning
        texts = [part.text for part in message.parts if isinstance(part, Thinking)]
        if reasoning is None or not texts:
            return ""
        return f"{reasoning.open}\n{''.join(texts)}\n{reasoning.close}{reasoning.after}"


def _ends_inside(text: str, reasoning: Reasoning) -> bool:
    return text.rstrip().endswith(reasoning.open.strip())


class _CallIds:
    """The ids calls have in the prompt: the client's own, or the form the template writes
    (Kimi's `functions.NAME:INDEX`; Mistral's nine characters, `{id9}`, from the client's id),
    the results following their calls."""

    def __init__(self, family: ModelFamily) -> None:
        self._form = family.call_id
        self._ids: dict[str, str] = {}
        self._names: dict[str, str] = {}

    def new(self, call: ToolCall) -> str:
        self._names[call.id] = call.name
        if not self._form:
            return call.id
        written = (
            self._form.replace("{name}", call.name)
            .replace("{index}", str(len(self._ids)))
            .replace("{id9}", hashlib.sha256(call.id.encode()).hexdigest()[:9])
        )
        self._ids[call.id] = written
        return written

    def of(self, call_id: str) -> str:
        return self._ids.get(call_id, call_id)

    def name_of(self, call_id: str) -> str | None:
        return self._names.get(call_id)


def _current_turn_start(messages: tuple[Message, ...]) -> int:
    """The index after the last user message: the assistant turns of the current exchange."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return index + 1
    return 0


def _content(message: Message, image: str | None) -> str:
    """Text, with each image's placeholder where it stands."""
    texts = [
        part.text if isinstance(part, Text) else image or ""
        for part in message.parts
        if isinstance(part, Text) or (isinstance(part, Image) and image)
    ]
    return "\n".join(text for text in texts if text) if len(texts) > 1 else "".join(texts)


def _results(
    message: Message, taught: TaughtTools, family: ModelFamily, loaded: dict[str, Tool]
) -> str:
    """Each result wrapped in the family's result tags; an error is shown as such. A tool
    search's result shows each tool it loads as the tool list shows tools (the list itself
    stays as it was, so the prompt's cached prefix does too)."""
    wrapped = []
    for part in message.parts:
        if isinstance(part, ToolResult):
            text = _result_text(part, family.image, loaded)
            content = family.error_prefix + text if part.is_error else text
            wrapped.append(taught.result.replace("{content}", content))
    return "\n".join(wrapped)


def _result_text(result: ToolResult, image: str | None, loaded: dict[str, Tool]) -> str:
    return "\n".join(
        _result_part(part, image, loaded)
        for part in result.parts
        if isinstance(part, Text | ToolReference) or (isinstance(part, Image) and image)
    )


def _result_part(
    part: Text | Image | ToolReference, image: str | None, loaded: dict[str, Tool]
) -> str:
    if isinstance(part, Text):
        return part.text
    if isinstance(part, ToolReference):
        tool = loaded.get(part.name)
        return orjson.dumps(_tool_json(tool)).decode() if tool else part.name
    return image or ""


def _teach_tools(turns: list[dict[str, Any]], tools: tuple[Tool, ...], taught: TaughtTools) -> None:
    """The tools follow the system prompt (one is made when there is none)."""
    lines = "\n".join(orjson.dumps(_tool_json(tool)).decode() for tool in tools)
    block = taught.system.replace("{tools}", lines)
    if any(tool.free_form for tool in tools):
        block += taught.free_form_system
    _after_system(turns, block)


def _present_tools(
    turns: list[dict[str, Any]], tools: tuple[Tool, ...], family: ModelFamily
) -> None:
    """The tools as the model's card documents them, after the system prompt."""
    entries = family.tool_separator.join(
        family.tool_entry.replace("{name}", tool.name)
        .replace("{description}", tool.description or "")
        .replace("{parameters}", orjson.dumps(tool.input_schema).decode())
        for tool in tools
    )
    _after_system(turns, family.system.replace("{tools}", entries))


def _after_system(turns: list[dict[str, Any]], block: str) -> None:
    if turns and turns[0]["role"] == "system":
        turns[0]["content"] = f"{turns[0]['content']}\n\n{block}" if turns[0]["content"] else block
    else:
        turns.insert(0, {"role": "system", "content": block})


def taught_call(family: ModelFamily, call: ToolCall) -> str:
    """A call as the family's structural tag writes it (a free-form one in its own strings)."""
    if call.free_form and family.free_form is not None:
        return family.free_form.opening(call.name) + call.arguments + family.free_form.end
    assert family.structural_tag is not None
    begin, end = _tag_ends(family.structural_tag, call.name)
    return begin + call.arguments + end


@functools.lru_cache(maxsize=1024)
def _tag_ends(structural_tag: str, name: str) -> tuple[str, str]:
    from xgrammar import get_model_structural_tag

    tool = {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    forced = {"type": "function", "function": {"name": name}}
    tag = get_model_structural_tag(structural_tag, [tool], forced, reasoning="disabled").format
    return str(tag.begin), str(tag.end)


def _template_call(call: ToolCall, call_id: str, as_text: bool = False) -> dict[str, Any]:
    """A call as templates read it: its arguments as an object (a free-form tool's input is its
    one `input` parameter; arguments that are no JSON object, as a cut call's, go back empty),
    or as JSON text for a template that takes them so."""
    arguments: Any
    if call.free_form:
        arguments = {FREE_FORM_INPUT: call.arguments}
    else:
        try:
            arguments = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            arguments = {}
        if not isinstance(arguments, dict):
            arguments = {}
    if as_text:
        arguments = orjson.dumps(arguments).decode()
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def _template_tool(tool: Tool) -> dict[str, Any]:
    """A tool as templates read it (OpenAI's function shape). A free-form tool is a function of
    one string parameter, `input`, that says the format its text follows."""
    if tool.free_form is None:
        return _tool_json(tool)
    form = tool.free_form
    described = "Free-form text, as it is"
    if form.syntax != "text":
        described += f", following this {form.syntax} definition:\n{form.definition}"
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = {
        "type": "object",
        "properties": {FREE_FORM_INPUT: {"type": "string", "description": described}},
        "required": [FREE_FORM_INPUT],
    }
    return {"type": "function", "function": function}


def _tool_json(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    if tool.free_form is None:
        function["parameters"] = tool.input_schema
        return {"type": "function", "function": function}
    free_form = tool.free_form
    form: dict[str, Any] = {"type": "text"}
    if free_form.syntax != "text":
        form = {"type": "grammar", "syntax": free_form.syntax, "definition": free_form.definition}
    function["format"] = form
    return {"type": "custom", "custom": function}

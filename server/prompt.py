"""Prompt rendering: canonical messages through the model's own chat template into token ids, in
this process, so counts are exact before the engine runs (count_tokens, context checks, usage).
Tools, tool calls and tool results are written in the model family's format (`grammars/`): the
same strings the grammar makes the model write and the output parser reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from grammars import ModelFamily, ThinkingFormat, ToolFormat
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

# The one parameter a free-form tool's call has in a family of named parameters (Qwen's XML).
FREE_FORM_INPUT = "input"


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer the renderer uses."""

    chat_template: str | None

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int], **kwargs: Any) -> str: ...


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    ids: list[int]

    @property
    def num_tokens(self) -> int:
        return len(self.ids)


class PromptRenderer:
    def __init__(self, tokenizer: Tokenizer, family: ModelFamily) -> None:
        self._tokenizer = tokenizer
        self.family = family
        self.token_bytes = TokenBytes(tokenizer)

    def render(self, request: GenerateRequest) -> Prompt:
        """A trailing assistant turn is left open: the answer continues where it ends. With a
        reasoning phase, the answer's prompt ends with the family's opening tag (the template's
        own, where it has a switch)."""
        continues = request.continues_answer
        thinking = self.thinking_for(request)
        options: dict[str, Any] = {}
        family_thinking = self.family.thinking
        if family_thinking is not None and family_thinking.switch:
            options[family_thinking.switch] = thinking is not None
        if self.family.template_calls:
            turns = self._template_turns(request)
            listed = tuple(tool for tool in request.tools if not tool.deferred)
            if listed and self.family.template_tools:
                options["tools"] = [_template_tool(tool) for tool in listed]
            elif listed and self.family.tools is not None:
                _add_tools(turns, listed, self.family.tools)
        else:
            turns = self._turns(request)
        text = self._tokenizer.apply_chat_template(
            turns,
            tokenize=False,
            add_generation_prompt=not continues,
            continue_final_message=continues,
            **options,
        )
        if thinking is not None and not text.endswith(thinking.open):
            text += thinking.open
        return Prompt(text, self._tokenizer.encode(text, add_special_tokens=False))

    def thinking_for(self, request: GenerateRequest) -> ThinkingFormat | None:
        """The reasoning format when this answer reasons first (not when it continues a
        trailing assistant turn: that answer has already begun)."""
        if request.thinking.mode is ThinkingMode.DISABLED or request.continues_answer:
            return None
        return self.family.thinking

    def _template_turns(self, request: GenerateRequest) -> list[dict[str, Any]]:
        """The conversation as chat templates read it (OpenAI's shape: `tool_calls` with their
        arguments, one role "tool" message per result, `reasoning_content`): the template renders
        them in its own format."""
        tools = self.family.tools
        turns: list[dict[str, Any]] = []
        loaded = {tool.name: tool for tool in request.tools if tool.deferred}
        for message in request.messages:
            if message.role == "tool":
                for part in message.parts:
                    if isinstance(part, ToolResult):
                        text = _result_text(part, self.family.image, loaded)
                        prefix = tools.error_prefix if tools is not None else ""
                        content = prefix + text if part.is_error else text
                        turns.append(
                            {"role": "tool", "tool_call_id": part.tool_call_id, "content": content}
                        )
                continue
            turn: dict[str, Any] = {
                "role": message.role,
                "content": _content(message, None, self.family.image),
            }
            calls = [part for part in message.parts if isinstance(part, ToolCall)]
            if calls and tools is not None:
                turn["tool_calls"] = [_template_call(call, tools.arguments_text) for call in calls]
            reasoning = [part.text for part in message.parts if isinstance(part, Thinking)]
            if reasoning:  # the key Qwen's and DeepSeek's templates read, and gpt-oss's
                turn["reasoning_content"] = turn["thinking"] = "".join(reasoning)
            turns.append(turn)
        return turns

    def _turns(self, request: GenerateRequest) -> list[dict[str, Any]]:
        tools = self.family.tools
        turns: list[dict[str, Any]] = []
        results: dict[str, Any] | None = None  # the turn tool results are being added to
        current = _current_turn_start(request.messages)
        loaded = {tool.name: tool for tool in request.tools if tool.deferred}
        for index, message in enumerate(request.messages):
            if message.role == "tool" and tools is not None:
                text = _results(message, tools, self.family.image, loaded)
                if results is None:
                    results = {"role": tools.result_role, "content": text}
                    turns.append(results)
                else:  # consecutive results share one turn
                    results["content"] += "\n" + text
            else:
                results = None
                content = _content(message, tools, self.family.image)
                if message.role == "assistant" and index >= current:
                    content = self._reasoning(message) + content
                turns.append({"role": message.role, "content": content})
        listed = tuple(tool for tool in request.tools if not tool.deferred)
        if listed and tools is not None:
            _add_tools(turns, listed, tools)
        return turns

    def _reasoning(self, message: Message) -> str:
        """Reasoning of the current turn goes back with it (a tool loop continues from it)."""
        thinking = self.family.thinking
        texts = [part.text for part in message.parts if isinstance(part, Thinking)]
        return thinking.block("".join(texts)) if thinking and texts else ""


def _current_turn_start(messages: tuple[Message, ...]) -> int:
    """The index after the last user message: the assistant turns of the current exchange."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return index + 1
    return 0


def _content(message: Message, tools: ToolFormat | None, image: str | None) -> str:
    """Text, with each image's placeholder where it stands, then the calls of the turn."""
    texts = [
        part.text if isinstance(part, Text) else image or ""
        for part in message.parts
        if isinstance(part, Text) or (isinstance(part, Image) and image)
    ]
    if tools is not None:
        texts += [
            tools.call(part.name, part.arguments, part.free_form)
            for part in message.parts
            if isinstance(part, ToolCall)
        ]
    return "\n".join(text for text in texts if text) if len(texts) > 1 else "".join(texts)


def _results(
    message: Message, tools: ToolFormat, image: str | None, loaded: dict[str, Tool]
) -> str:
    """Each result wrapped in the family's result tags; an error is shown as such. A tool
    search's result shows each tool it loads as the tool list shows tools (the list itself
    stays as it was, so the prompt's cached prefix does too)."""
    wrapped = []
    for part in message.parts:
        if isinstance(part, ToolResult):
            text = _result_text(part, image, loaded)
            content = tools.error_prefix + text if part.is_error else text
            wrapped.append(tools.result.replace("{content}", content))
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


def _add_tools(turns: list[dict[str, Any]], tools: tuple[Tool, ...], form: ToolFormat) -> None:
    """The tools follow the system prompt (one is made when there is none)."""
    lines = form.tool_separator.join(_tool_entry(tool, form.tool_entry) for tool in tools)
    block = form.system.replace("{tools}", lines)
    if any(tool.free_form for tool in tools):
        block += form.free_form_system
    if turns and turns[0]["role"] == "system":
        turns[0]["content"] = f"{turns[0]['content']}\n\n{block}" if turns[0]["content"] else block
    else:
        turns.insert(0, {"role": "system", "content": block})


def _tool_entry(tool: Tool, entry: str) -> str:
    if entry == "{json}":
        return orjson.dumps(_tool_json(tool)).decode()
    parameters = orjson.dumps(tool.input_schema).decode()
    return (
        entry.replace("{name}", tool.name)
        .replace("{description}", tool.description or "")
        .replace("{parameters}", parameters)
    )


def _template_call(call: ToolCall, as_text: bool = False) -> dict[str, Any]:
    """A call as templates read it: its arguments as an object (a free-form tool's input is its
    one `input` parameter; arguments that are no JSON object, as a cut call's, go back empty),
    or as JSON text for a template that takes them so."""
    if as_text and not call.free_form:
        function = {"name": call.name, "arguments": call.arguments}
        return {"id": call.id, "type": "function", "function": function}
    if call.free_form:
        arguments: Any = {FREE_FORM_INPUT: call.arguments}
    else:
        try:
            arguments = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            arguments = {}
        if not isinstance(arguments, dict):
            arguments = {}
    return {
        "id": call.id,
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


class TokenBytes:
    """A token's exact bytes, for logprobs: from a byte-level BPE vocabulary (GPT-2's byte to
    character table, reversed), else from decoding the token alone. Memoized per token id."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        decoder = type(getattr(backend, "decoder", None)).__name__
        self._byte_level = decoder == "ByteLevel" and hasattr(tokenizer, "convert_ids_to_tokens")
        self._known: dict[int, bytes] = {}

    def __call__(self, token_id: int) -> bytes:
        found = self._known.get(token_id)
        if found is None:
            found = self._known[token_id] = self._bytes(token_id)
        return found

    def _bytes(self, token_id: int) -> bytes:
        if self._byte_level:
            piece = getattr(self._tokenizer, "convert_ids_to_tokens")(token_id)  # noqa: B009
            if isinstance(piece, str) and all(char in _BYTE_OF for char in piece):
                return bytes(_BYTE_OF[char] for char in piece)
        return self._tokenizer.decode([token_id]).encode()


def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet: each byte as a printable character, reversed."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in chars:
            chars[byte] = chr(256 + extra)
            extra += 1
    return {char: byte for byte, char in chars.items()}


_BYTE_OF = _byte_of_char()  # a constant table

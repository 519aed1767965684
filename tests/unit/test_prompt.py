"""Prompt rendering through the embedded model's own chat template and tokenizer."""

from __future__ import annotations

import pytest

from grammars import format_of
from grammars.prompt import PromptRenderer
from server.canonical import (
    GenerateRequest,
    Message,
    Text,
    Thinking,
    ThinkingConfig,
    ThinkingMode,
    Tool,
    ToolCall,
    ToolResult,
)
from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def renderer() -> PromptRenderer:
    tokenizer = load_tokenizer(str(ensure_converted(default_cache_dir())))
    return PromptRenderer(tokenizer, format_of(tokenizer))


def request(*turns: tuple[str, str]) -> GenerateRequest:
    messages = tuple(Message(role, (Text(text),)) for role, text in turns)  # type: ignore[arg-type]
    return GenerateRequest("m", messages)


def test_chatml_turns_and_an_open_assistant_turn(renderer: PromptRenderer) -> None:
    prompt = renderer.render(request(("system", "Be brief."), ("user", "Hi")))
    assert prompt.text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert prompt.num_tokens == len(prompt.ids) > 0


def test_a_trailing_assistant_turn_is_left_open(renderer: PromptRenderer) -> None:
    prompt = renderer.render(request(("system", "S"), ("user", "Count."), ("assistant", "1, 2,")))
    assert prompt.text.endswith("<|im_start|>assistant\n1, 2,")


def test_a_system_turn_is_rendered_where_it_stands(renderer: PromptRenderer) -> None:
    text = renderer.render(
        request(("user", "Hi"), ("system", "Now in French."), ("user", "Ok"))
    ).text
    assert (
        text.index("<|im_start|>user\nHi") < text.index("Now in French.") < text.index("user\nOk")
    )


WEATHER = Tool(
    "get_weather", "Weather.", {"type": "object", "properties": {"city": {"type": "string"}}}
)


def test_tools_follow_the_system_prompt(renderer: PromptRenderer) -> None:
    req = GenerateRequest(
        "m",
        (Message("system", (Text("Be brief."),)), Message("user", (Text("Hi"),))),
        tools=(WEATHER,),
    )
    text = renderer.render(req).text
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert (
        '{"type":"function","function":{"name":"get_weather","description":"Weather.","parameters":'
        in text
    )


def test_tool_calls_and_results_render_in_the_family_format(renderer: PromptRenderer) -> None:
    messages = (
        Message("user", (Text("Weather?"),)),
        Message("assistant", (ToolCall("x", "get_weather", '{"city": "Oslo"}'),)),
        Message("tool", (ToolResult("x", (Text("3C"),)),)),
        Message("tool", (ToolResult("y", (Text("boom"),), is_error=True),)),
    )
    text = renderer.render(GenerateRequest("m", messages, tools=(WEATHER,))).text
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert f"<|im_start|>assistant\n{call}<|im_end|>" in text
    results = (
        "<tool_response>\n3C\n</tool_response>\n<tool_response>\nError: boom\n</tool_response>"
    )
    assert f"<|im_start|>user\n{results}<|im_end|>" in text


def test_reasoning_goes_back_for_the_current_turn_only(
    renderer: PromptRenderer,
) -> None:
    messages = (
        Message("user", (Text("Hi"),)),
        Message("assistant", (Thinking("earlier"), Text("Hello"))),
        Message("user", (Text("Weather?"),)),
        Message("assistant", (Thinking("use the tool"), ToolCall("x", "get_weather", "{}"))),
        Message("tool", (ToolResult("x", (Text("3C"),)),)),
    )
    request = GenerateRequest(
        "m", messages, tools=(WEATHER,), thinking=ThinkingConfig(ThinkingMode.ADAPTIVE)
    )
    prompt = renderer.render(request)
    assert "earlier" not in prompt.text
    assert "<|im_start|>assistant\n<think>\nuse the tool\n</think>\n\n<tool_call>" in prompt.text
    assert prompt.text.endswith("<|im_start|>assistant\n<think>") and prompt.opened

"""Prompt rendering through the embedded model's own chat template and tokenizer."""

from __future__ import annotations

import pytest

from server.canonical import GenerateRequest, Message, Text
from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.prompt import PromptRenderer, load_tokenizer


@pytest.fixture(scope="module")
def renderer() -> PromptRenderer:
    return PromptRenderer(load_tokenizer(str(ensure_converted(default_cache_dir()))))


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

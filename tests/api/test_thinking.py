"""Extended thinking through the real server and both SDKs: reasoning comes first, its budget is a
hard cap (counted with the model's own tokenizer), and what follows it under a grammar stays
valid. Two requests here run a full 1,024-token budget; the rest keep max_tokens small."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.prompt import Tokenizer, load_tokenizer
from tests.api.sse import events
from tests.api.test_json_output import CITY
from tests.api.test_tools import ANTHROPIC_TOOLS, ASK, SCHEMAS

pytestmark = pytest.mark.heavy  # in-process and through the router (tests/conftest.py)

BUDGET = 1024  # the contract's minimum
QUESTION = [{"role": "user", "content": "Is 391 prime?"}]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer(str(ensure_converted(default_cache_dir())))


def count(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def test_the_budget_caps_the_reasoning_and_a_forced_call_follows(
    http: httpx.Client, model: str, tokenizer: Tokenizer
) -> None:
    body = {
        "model": model,
        "max_tokens": BUDGET + 160,
        "temperature": 0,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": BUDGET},
        "messages": ASK,
        "tools": ANTHROPIC_TOOLS,
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    }
    with http.stream("POST", "/v1/infer/v1/messages", json=body) as response:
        received = [data for name, data in events(response) if name != "ping"]
    starts = [e["content_block"] for e in received if e["type"] == "content_block_start"]
    assert [block["type"] for block in starts] == ["thinking", "tool_use"]
    thinking = [e for e in received if e["type"] == "content_block_delta" and e["index"] == 0]
    kinds = [e["delta"]["type"] for e in thinking]
    assert set(kinds[:-1]) == {"thinking_delta"}
    assert kinds[-1] == "signature_delta"  # last, before the block stops
    assert thinking[-1]["delta"]["signature"]
    reasoning = "".join(e["delta"]["thinking"] for e in thinking[:-1])
    assert 0 < count(tokenizer, reasoning) <= BUDGET
    fragments = [
        e["delta"]["partial_json"]
        for e in received
        if e["type"] == "content_block_delta" and e["index"] == 1
    ]
    arguments = json.loads("".join(fragments))
    jsonschema.validate(arguments, SCHEMAS[starts[1]["name"]])
    assert received[-2]["delta"]["stop_reason"] == "tool_use"


def test_the_budget_caps_the_reasoning_and_a_json_answer_follows(
    anthropic_client: anthropic.Anthropic, model: str, tokenizer: Tokenizer
) -> None:
    message = anthropic_client.messages.create(
        model=model,
        max_tokens=BUDGET + 120,
        thinking={"type": "enabled", "budget_tokens": BUDGET},
        messages=[{"role": "user", "content": "Describe Lisbon as JSON."}],
        output_config={"format": {"type": "json_schema", "schema": CITY}},
        extra_body={"temperature": 0},
    )
    assert [block.type for block in message.content] == ["thinking", "text"]
    thinking, answer = message.content
    assert thinking.type == "thinking"
    assert answer.type == "text"
    assert thinking.signature
    assert count(tokenizer, thinking.thinking) <= BUDGET
    jsonschema.validate(json.loads(answer.text), CITY)
    assert message.stop_reason == "end_turn"


def test_adaptive_reasons_first_bounded_by_max_tokens(
    anthropic_client: anthropic.Anthropic, model: str
) -> None:
    with anthropic_client.messages.stream(
        model=model, max_tokens=16, thinking={"type": "adaptive"}, messages=QUESTION
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "thinking"
    assert final.content[0].thinking
    assert final.content[0].signature
    assert final.usage.output_tokens == 16  # reasoning counts as output
    assert final.stop_reason == "max_tokens"


@pytest.mark.parametrize("thinking", [None, {"type": "disabled"}])
def test_disabled_means_no_reasoning_phase(
    anthropic_client: anthropic.Anthropic, model: str, thinking: Any
) -> None:
    extra = {} if thinking is None else {"thinking": thinking}
    message = anthropic_client.messages.create(
        model=model, max_tokens=8, messages=QUESTION, **extra
    )
    assert all(block.type == "text" for block in message.content)


def test_a_trailing_assistant_turn_has_no_reasoning_phase(
    anthropic_client: anthropic.Anthropic, model: str
) -> None:
    message = anthropic_client.messages.create(
        model=model,
        max_tokens=8,
        thinking={"type": "adaptive"},
        messages=[*QUESTION, {"role": "assistant", "content": "No, because"}],
    )
    assert all(block.type == "text" for block in message.content)


def test_chat_enable_thinking_fills_reasoning_content(
    openai_client: openai.OpenAI, model: str
) -> None:
    thinking = {"chat_template_kwargs": {"enable_thinking": True}}
    completion = openai_client.chat.completions.create(
        model=model, max_tokens=12, messages=QUESTION, extra_body=thinking
    )
    message = completion.choices[0].message
    assert (message.model_extra or {}).get("reasoning_content")
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 12
    plain = openai_client.chat.completions.create(model=model, max_tokens=4, messages=QUESTION)
    assert "reasoning_content" not in (plain.choices[0].message.model_extra or {})


def test_chat_streams_reasoning_content(openai_client: openai.OpenAI, model: str) -> None:
    chunks = list(
        openai_client.chat.completions.create(
            model=model,
            max_tokens=12,
            messages=QUESTION,
            stream=True,
            extra_body={"chat_template_kwargs": {"enable_thinking": True}},
        )
    )
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        for c in chunks
        if c.choices
    )
    assert reasoning


def test_reasoning_goes_back_for_the_current_turn_only(
    anthropic_client: anthropic.Anthropic, model: str
) -> None:
    thought = {"type": "thinking", "thinking": "The user wants the weather.", "signature": "x"}
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    call = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "get_weather",
        "input": {"city": "Eugene", "unit": "celsius"},
    }
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "52F"}],
    }

    def tokens(messages: list[Any]) -> int:
        counted = anthropic_client.messages.count_tokens(
            model=model, messages=messages, tools=ANTHROPIC_TOOLS
        )
        return counted.input_tokens

    # In a tool loop, the turn's reasoning goes back with it...
    loop = [*ASK, {"role": "assistant", "content": [thought, redacted, call]}, result]
    bare_loop = [*ASK, {"role": "assistant", "content": [call]}, result]
    assert tokens(loop) > tokens(bare_loop)
    # ...while an earlier turn's is left out, as is redacted reasoning everywhere.
    earlier = [
        *ASK,
        {"role": "assistant", "content": [thought, redacted, {"type": "text", "text": "Sunny."}]},
        *QUESTION,
    ]
    bare_earlier = [
        *ASK,
        {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]},
        *QUESTION,
    ]
    assert tokens(earlier) == tokens(bare_earlier)
    answer = anthropic_client.messages.create(
        model=model,
        max_tokens=4,
        messages=loop,
        tools=ANTHROPIC_TOOLS,
        thinking={"type": "adaptive"},
    )
    assert answer.content[0].type == "thinking"


def test_chat_reasoning_content_in_history_is_taken(
    openai_client: openai.OpenAI, model: str
) -> None:
    history = [
        *QUESTION,
        {"role": "assistant", "content": "No.", "reasoning_content": "391 = 17 * 23."},
        {"role": "user", "content": "Why?"},
    ]
    completion = openai_client.chat.completions.create(model=model, max_tokens=4, messages=history)
    assert completion.choices[0].finish_reason in ("stop", "length")

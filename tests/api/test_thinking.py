"""Extended thinking through the real server and both SDKs: reasoning comes first, its budget is a
hard cap (counted with the model's own tokenizer), and what follows it under a grammar stays
valid. Two requests here run a full budget (256 tokens, at once); the rest keep max_tokens small."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from server.tokenizer import Tokenizer, load_tokenizer
from tests.api.sse import events
from tests.api.test_json_output import CITY
from tests.api.test_tools import ANTHROPIC_TOOLS, ASK, SCHEMAS

MINIMAL_BUDGET = 256  # the Responses API's reasoning.effort "minimal"
QUESTION = [{"role": "user", "content": "Is 391 prime?"}]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer(str(ensure_converted(default_cache_dir())))


def count(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def forced_call_after_the_budget(http: httpx.Client, model: str, tokenizer: Tokenizer) -> None:
    body = {
        "model": model,
        "input": ASK,
        "max_output_tokens": MINIMAL_BUDGET + 120,
        "temperature": 0,
        "reasoning": {"effort": "minimal"},
        "tools": [
            {"type": "function", "name": "get_weather", "parameters": SCHEMAS["get_weather"]}
        ],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": False,
    }
    response = http.post("/v1/infer/responses", json=body).json()
    kinds = [item["type"] for item in response["output"]]
    assert kinds == ["reasoning", "function_call"], response
    reasoning = "".join(part["text"] for part in response["output"][0]["summary"])
    assert 0 < count(tokenizer, reasoning) <= MINIMAL_BUDGET
    call = response["output"][1]
    jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])
    assert response["status"] == "completed"


def json_answer_after_the_budget(http: httpx.Client, model: str, tokenizer: Tokenizer) -> None:
    body = {
        "model": model,
        "input": "Describe Lisbon as JSON.",
        "max_output_tokens": MINIMAL_BUDGET + 120,
        "temperature": 0,
        "stream": True,
        "reasoning": {"effort": "minimal"},
        "text": {"format": {"type": "json_schema", "name": "city", "schema": CITY}},
    }
    with http.stream("POST", "/v1/infer/responses", json=body) as response:
        received = list(events(response))
    final = received[-1][1]["response"]
    assert final["status"] == "completed", final
    reasoning, message = final["output"]
    assert reasoning["type"] == "reasoning" and message["type"] == "message"
    thought = "".join(part["text"] for part in reasoning["summary"])
    assert 0 < count(tokenizer, thought) <= MINIMAL_BUDGET
    jsonschema.validate(json.loads(message["content"][0]["text"]), CITY)


def test_the_budget_caps_the_reasoning_and_a_forced_call_or_a_json_answer_follows(
    http: httpx.Client, model: str, tokenizer: Tokenizer
) -> None:
    """The grammar closes the reasoning when its budget is spent (the Responses API's minimal
    effort: 256 tokens; Messages' budget_tokens, 1,024 at least, takes the same way), then
    holds what follows to its own grammar. The two at once (the runtime decodes them together),
    streamed and not."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = [
            pool.submit(forced_call_after_the_budget, http, model, tokenizer),
            pool.submit(json_answer_after_the_budget, http, model, tokenizer),
        ]
        for future in done:
            future.result()


@pytest.mark.every_engine
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

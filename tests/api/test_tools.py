"""Tool calls through the real server and both SDKs, for each tool_choice mode, streaming and not.
What is asserted is what the grammar guarantees, never what the model chooses to say: a call when
one must come, none when none may, one when parallel calls are off, arguments that validate."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from grammars.family import family
from tests.api.contract import whole_prompt
from tests.api.sse import events

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME_SCHEMA = {
    "type": "object",
    "properties": {"hours_ahead": {"type": "integer", "minimum": 0, "maximum": 48}},
    "required": ["hours_ahead"],
    "additionalProperties": False,
}
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "get_time": TIME_SCHEMA}
ANTHROPIC_TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": WEATHER_SCHEMA,
    },
    {"name": "get_time", "description": "The time, some hours ahead.", "input_schema": TIME_SCHEMA},
]
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": t["name"],
            "description": t["description"],
            "parameters": t["input_schema"],
        },
    }
    for t in ANTHROPIC_TOOLS
]
ASK = [{"role": "user", "content": "What is the weather in Eugene, Oregon? Use the tool."}]
GREEDY = {"temperature": 0}
MAX_TOKENS = 80  # a call here is about 30 tokens
# Each tool_choice mode as JSON, and streamed where a call must come (the streamed shape of
# calls, and of text, is checked on its own below and in test_chat/test_messages).
WAYS = {
    "anthropic": [("auto", False), ("any", False), ("any", True), ("named", True), ("none", False)],
    "openai": [
        ("auto", False), ("required", False), ("required", True), ("named", True), ("none", False)
    ],
}  # fmt: skip


def assert_valid_call(name: str, arguments: dict[str, Any]) -> None:
    assert name in SCHEMAS
    jsonschema.validate(arguments, SCHEMAS[name])


def assert_calls(calls: list[tuple[str, dict[str, Any]]], stop: str, cut: str) -> None:
    """Every call validates, except the last when max_tokens cut it short."""
    complete = calls[:-1] if stop == cut else calls
    for name, arguments in complete:
        assert_valid_call(name, arguments)


# ---- Anthropic ----


def anthropic_calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    calls = [(b.name, b.input) for b in message.content if b.type == "tool_use"]
    assert all(b.id.startswith("toolu_") for b in message.content if b.type == "tool_use")
    return calls


CHOICES = {
    "auto": {"type": "auto"},
    "any": {"type": "any"},
    "named": {"type": "tool", "name": "get_time"},
    "none": {"type": "none"},
}


@pytest.mark.parametrize(("choice", "stream"), WAYS["anthropic"])
def test_anthropic_tool_choice(
    anthropic_client: anthropic.Anthropic, model: str, choice: str, stream: bool
) -> None:
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "messages": ASK,
        "tools": ANTHROPIC_TOOLS,
        "tool_choice": CHOICES[choice],
        "extra_body": GREEDY,
    }
    if stream:
        with anthropic_client.messages.stream(**kwargs) as s:
            message = s.get_final_message()
    else:
        message = anthropic_client.messages.create(**kwargs)
    calls = anthropic_calls(message)
    if choice == "none":
        assert calls == []
        assert message.stop_reason != "tool_use"
    if choice in ("any", "named"):
        assert calls, "a call must come"
        assert message.content[0].type == "tool_use"  # calls only: no text before
        assert message.stop_reason in ("tool_use", "max_tokens")
    if choice == "named":
        assert {name for name, _ in calls} == {"get_time"}
    if calls and message.stop_reason != "max_tokens":
        assert message.stop_reason == "tool_use"
    assert_calls(calls, message.stop_reason or "", "max_tokens")


@pytest.mark.parametrize(("choice", "stream"), [("any", False), ("named", True)])
def test_anthropic_one_call_when_parallel_calls_are_off(
    anthropic_client: anthropic.Anthropic, model: str, choice: str, stream: bool
) -> None:
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "messages": ASK,
        "tools": ANTHROPIC_TOOLS,
        "tool_choice": {**CHOICES[choice], "disable_parallel_tool_use": True},
        "extra_body": GREEDY,
    }
    if stream:
        with anthropic_client.messages.stream(**kwargs) as s:
            message = s.get_final_message()
    else:
        message = anthropic_client.messages.create(**kwargs)
    calls = anthropic_calls(message)
    assert len(calls) == 1
    assert message.stop_reason == "tool_use"
    assert_valid_call(*calls[0])


@pytest.mark.every_engine
def test_anthropic_streamed_fragments_concatenate_to_the_input(
    http: httpx.Client, model: str
) -> None:
    body = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "messages": ASK,
        "tools": ANTHROPIC_TOOLS,
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        **GREEDY,
    }
    with http.stream("POST", "/v1/infer/v1/messages", json=body) as response:
        received = [data for name, data in events(response) if name != "ping"]
    starts = [e for e in received if e["type"] == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["tool_use"]
    block = starts[0]["content_block"]
    assert block["input"] == {}
    assert block["id"].startswith("toolu_")
    fragments = [
        e["delta"]["partial_json"]
        for e in received
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    ]
    # A format whose calls SGLang's stream reads as its whole reading streams them as they are
    # written; the others go out read whole, when the answer ends (grammars/families/).
    [card] = http.get("/v1/infer/models").json()["data"]
    assert len(fragments) > 1 or not family(card["family"]).streams_calls
    assert_valid_call(block["name"], json.loads("".join(fragments)))
    assert received[-2]["delta"]["stop_reason"] == "tool_use"


def tool_result(call_id: str, **extra: Any) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": "52F and raining"}
    return {"role": "user", "content": [{**block, **extra}]}


def test_anthropic_weather_loop_round_trips_history(
    anthropic_client: anthropic.Anthropic, model: str
) -> None:
    """The loop of the messages guide: call, run the tool, send the result, get an answer."""
    first = anthropic_client.messages.create(
        model=model,
        max_tokens=MAX_TOKENS,
        messages=ASK,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        extra_body=GREEDY,
    )
    call = next(b for b in first.content if b.type == "tool_use")
    history: list[Any] = [*ASK, {"role": "assistant", "content": first.content}]
    messages = [*history, tool_result(call.id)]
    answer = anthropic_client.messages.create(
        model=model, max_tokens=16, messages=messages, tools=ANTHROPIC_TOOLS, extra_body=GREEDY
    )
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
    counted = anthropic_client.messages.count_tokens(
        model=model, messages=messages, tools=ANTHROPIC_TOOLS
    )
    assert whole_prompt(answer.usage) == counted.input_tokens
    failed = anthropic_client.messages.count_tokens(
        model=model, messages=[*history, tool_result(call.id, is_error=True)], tools=ANTHROPIC_TOOLS
    )
    assert failed.input_tokens > counted.input_tokens  # the model sees "Error: " before it


# ---- OpenAI ----

OPENAI_CHOICES: dict[str, Any] = {
    "auto": "auto",
    "required": "required",
    "named": {"type": "function", "function": {"name": "get_time"}},
    "none": "none",
}


def openai_streamed(client: openai.OpenAI, kwargs: dict[str, Any]) -> tuple[Any, str]:
    """The message a stream's deltas add up to (content, and each call's arguments in order),
    with its finish reason: what a client does with the chunks."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish = ""
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        choice = chunk.choices[0]
        delta = choice.delta
        content.append(delta.content or "")
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"arguments": ""})
            if call.id:
                entry.update(id=call.id, name=call.function.name, type=call.type)  # type: ignore[union-attr]
            entry["arguments"] += call.function.arguments or ""  # type: ignore[union-attr]
        finish = choice.finish_reason or finish
    message = openai.types.chat.ChatCompletionMessage(
        role="assistant",
        content="".join(content) or None,
        tool_calls=[
            {
                "id": c["id"],
                "type": c["type"],
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for _, c in sorted(calls.items())
        ]
        or None,
    )
    return message, finish


def openai_calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    calls = message.tool_calls or []
    assert all(c.id.startswith("call_") and c.type == "function" for c in calls)
    parsed = []
    for call in calls:
        try:
            arguments = json.loads(call.function.arguments)
        except json.JSONDecodeError:
            arguments = {"unparsed": call.function.arguments}
        parsed.append((call.function.name, arguments))
    return parsed


@pytest.mark.parametrize(("choice", "stream"), WAYS["openai"])
def test_openai_tool_choice(
    openai_client: openai.OpenAI, model: str, choice: str, stream: bool
) -> None:
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "messages": ASK,
        "tools": OPENAI_TOOLS,
        "tool_choice": OPENAI_CHOICES[choice],
        "temperature": 0,
    }
    if stream:
        message, finish = openai_streamed(openai_client, kwargs)
    else:
        [result] = openai_client.chat.completions.create(**kwargs).choices
        message, finish = result.message, result.finish_reason
    calls = openai_calls(message)
    if choice == "none":
        assert calls == []
        assert finish != "tool_calls"
    if choice in ("required", "named"):
        assert calls, "a call must come"
        assert finish in ("tool_calls", "length")
        assert not message.content  # calls only
    if choice == "named":
        assert {name for name, _ in calls} == {"get_time"}
    if calls and finish != "length":
        assert finish == "tool_calls"
    assert_calls(calls, finish, "length")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_openai_one_call_when_parallel_calls_are_off(
    openai_client: openai.OpenAI, model: str, stream: bool
) -> None:
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "messages": ASK,
        "tools": OPENAI_TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "temperature": 0,
    }
    if stream:
        message, finish = openai_streamed(openai_client, kwargs)
    else:
        [result] = openai_client.chat.completions.create(**kwargs).choices
        message, finish = result.message, result.finish_reason
    calls = openai_calls(message)
    assert len(calls) == 1
    assert finish == "tool_calls"
    assert message.content is None
    assert_valid_call(*calls[0])


@pytest.mark.every_engine
def test_openai_streamed_tool_call_deltas(http: httpx.Client, model: str) -> None:
    body = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "messages": ASK,
        "tools": OPENAI_TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "temperature": 0,
    }
    with http.stream("POST", "/v1/infer/chat/completions", json=body) as response:
        chunks = [data for _, data in events(response)][:-1]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    calls = [d["tool_calls"] for d in deltas if d.get("tool_calls")]
    head = calls[0][0]
    assert head["index"] == 0
    assert head["id"].startswith("call_")
    assert head["type"] == "function"
    assert head["function"]["arguments"] == ""
    rest = [c[0] for c in calls[1:]]
    assert all(
        set(r) == {"index", "function"} and set(r["function"]) == {"arguments"} for r in rest
    )
    arguments = "".join(r["function"]["arguments"] for r in rest)
    assert_valid_call(head["function"]["name"], json.loads(arguments))
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_openai_tool_messages_round_trip(openai_client: openai.OpenAI, model: str) -> None:
    first = openai_client.chat.completions.create(
        model=model, max_tokens=MAX_TOKENS, messages=ASK, tools=OPENAI_TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False, temperature=0,
    )  # fmt: skip
    message = first.choices[0].message
    call = message.tool_calls[0]  # type: ignore[index]
    follow_up = [
        *ASK,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "52F and raining"},
    ]
    answer = openai_client.chat.completions.create(
        model=model, max_tokens=16, messages=follow_up, tools=OPENAI_TOOLS, temperature=0
    )
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert answer.usage is not None
    assert answer.usage.prompt_tokens > first.usage.prompt_tokens  # type: ignore[union-attr]


def test_a_schema_the_grammar_cannot_express_is_a_400_naming_it(
    http: httpx.Client, model: str
) -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    body = {
        "model": model,
        "max_tokens": 8,
        "messages": ASK,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
        "tool_choice": "required",
    }
    response = http.post("/v1/infer/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request", "tools.0.function.parameters")
    assert ".cc:" not in error["message"]  # the compiler's reason, not its source location

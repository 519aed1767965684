"""POST /v1/infer/responses (the OpenAI Responses API) through the official OpenAI SDK and raw
httpx, on the real server and model: the response object and its items, the typed stream with
its sequence numbers, JSON answers through `responses.parse`, a function tool's round trip, the
async client. Assertions are on protocol shape and on what grammars guarantee, never on what the
model says."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import jsonschema
import openai
import pydantic
import pytest

from tests.api.conventions import COUNTING, assert_b3os, assert_ids, server_timing
from tests.api.sse import events
from tests.api.test_tools import MAX_TOKENS, SCHEMAS, WEATHER_SCHEMA

ROUTE = "/v1/infer/responses"
RESPONSE_ID = r"^resp_[0-9a-hjkmnp-tv-z]{26}$"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": WEATHER_SCHEMA,
    "strict": True,
}
ASK_WEATHER = "What is the weather in Paris?"
# An answer the grammar must end within a few tokens: a stream that surely completes.
DONE_SOON = {
    "format": {
        "type": "json_schema",
        "name": "verdict",
        "schema": {
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
            "additionalProperties": False,
        },
        "strict": True,
    }
}

ANSWER_TOKENS = 16  # an answer after the call: some text, whatever the model says


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=40)
    population: int = pydantic.Field(ge=0, le=100_000_000)


def body(model: str, **overrides: Any) -> dict[str, Any]:
    return {"model": model, "input": "Say hello.", "max_output_tokens": 8, **overrides}


def assert_usage(usage: dict[str, Any], max_output: int) -> None:
    assert set(usage) == {
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    }
    assert usage["input_tokens"] > 0
    assert 0 < usage["output_tokens"] <= max_output
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] >= 0
    assert 0 <= usage["output_tokens_details"]["reasoning_tokens"] <= usage["output_tokens"]


def test_sdk_creates_a_response(openai_client: openai.OpenAI, model: str) -> None:
    response = openai_client.responses.create(model=model, input="Say hello.", max_output_tokens=8)
    assert response.id.startswith("resp_")
    assert response.object == "response"
    assert response.model == model
    assert response.status in ("completed", "incomplete")
    assert response.store is True  # OpenAI's default: kept
    assert response.previous_response_id is None
    [item] = response.output
    assert item.type == "message"
    assert item.role == "assistant"
    assert item.id.startswith("msg_")
    [part] = item.content
    assert part.type == "output_text"
    assert response.output_text == part.text
    assert response.usage is not None
    assert 0 < response.usage.output_tokens <= 8
    if response.status == "incomplete":
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"


def test_the_json_body_as_openai_writes_it(http: httpx.Client, model: str) -> None:
    response = http.post(
        f"{ROUTE}", json=body(model, instructions="Be brief.", metadata={"k": "v"})
    )
    assert response.status_code == 200
    request_id = assert_ids(response)
    assert "model" in server_timing(response)
    data = response.json()
    assert list(data)[:4] == ["id", "object", "created_at", "status"]
    assert data["id"] == "resp_" + request_id.removeprefix("req_")
    # What the response repeats of the request, and the defaults it states.
    assert data["instructions"] == "Be brief."
    assert data["metadata"] == {"k": "v"}
    assert data["max_output_tokens"] == 8
    assert data["tools"] == [] and data["tool_choice"] == "auto"
    assert data["text"] == {"format": {"type": "text"}}
    assert data["truncation"] == "disabled" and data["store"] is True  # OpenAI's default
    assert data["error"] is None and data["background"] is False
    # Left unset: sampled as the embedded model recommends (its generation_config.json).
    assert (data["temperature"], data["top_p"]) == (0.2, 0.9)
    assert_usage(data["usage"], 8)
    assert_b3os(data["b3os"], streamed=False)
    [item] = data["output"]
    assert item["status"] == data["status"]
    assert item["content"][0]["annotations"] == []
    entry = http.get(f"/v1/requests/{request_id}").json()
    assert entry["route"] == "responses" and entry["status"] == "succeeded"
    assert entry["usage"]["completion_tokens"] == data["usage"]["output_tokens"]


def test_a_cut_answer_is_incomplete(http: httpx.Client, model: str) -> None:
    """max_output_tokens ends a long answer: status incomplete, with the reason."""
    counting = [{"role": m["role"], "content": m["content"]} for m in COUNTING]
    response = http.post(ROUTE, json=body(model, input=counting, temperature=0)).json()
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["usage"]["output_tokens"] == 8


def stream_events(http: httpx.Client, payload: dict[str, Any]) -> list[tuple[str | None, Any]]:
    with http.stream("POST", ROUTE, json={**payload, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "ttft" in server_timing(response)
        return list(events(response))


@pytest.mark.every_engine
def test_the_stream_as_openai_sends_it(http: httpx.Client, model: str) -> None:
    received = stream_events(http, body(model, max_output_tokens=12))
    names = [name for name, _ in received]
    assert all(name == data["type"] for name, data in received)
    assert [data["sequence_number"] for _, data in received] == list(range(len(received)))
    assert names[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert names[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        names[-1],
    ]
    assert names[-1] in ("response.completed", "response.incomplete")
    deltas = [data["delta"] for name, data in received if name == "response.output_text.delta"]
    assert deltas and names.count("response.output_text.delta") == len(names) - 8
    created = received[0][1]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    final = received[-1][1]["response"]
    assert final["id"] == created["id"]
    [item] = final["output"]
    assert item["content"][0]["text"] == "".join(deltas)
    assert received[-2][1]["item"] == item
    assert_usage(final["usage"], 12)
    assert_b3os(final["b3os"], streamed=True)


def test_sdk_stream_helper_and_final_response(openai_client: openai.OpenAI, model: str) -> None:
    text: Any = DONE_SOON
    with openai_client.responses.stream(
        model=model, input="Is water wet?", text=text, max_output_tokens=40
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()  # needs response.completed: the grammar ends it
    assert final.status == "completed"
    assert final.output_text == "".join(deltas)
    assert isinstance(json.loads(final.output_text)["ok"], bool)


def test_sdk_parse_holds_the_answer_to_the_model(openai_client: openai.OpenAI, model: str) -> None:
    parsed = openai_client.responses.parse(
        model=model,
        input="Name a large city and its population.",
        text_format=City,
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    )
    assert parsed.status == "completed"
    city = parsed.output_parsed
    assert isinstance(city, City)
    assert parsed.text is not None and parsed.text.format.type == "json_schema"


def test_json_object_format(http: httpx.Client, model: str) -> None:
    payload = body(
        model,
        input="Describe Paris as a JSON object.",
        text={"format": {"type": "json_object"}},
        max_output_tokens=40,
        temperature=0,
    )
    response = http.post(ROUTE, json=payload).json()
    assert response["text"]["format"] == {"type": "json_object"}
    text = response["output"][0]["content"][0]["text"]
    if response["status"] == "completed":
        assert isinstance(json.loads(text), dict)
    else:
        assert text.lstrip().startswith("{")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_required_tool_is_called_with_valid_arguments(
    http: httpx.Client, model: str, stream: bool
) -> None:
    payload = body(
        model,
        input=ASK_WEATHER,
        tools=[WEATHER_TOOL],
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    )
    if stream:
        received = stream_events(http, payload)
        response = received[-1][1]["response"]
        argument_deltas = [
            data["delta"]
            for name, data in received
            if name == "response.function_call_arguments.delta"
        ]
        [done] = [d for n, d in received if n == "response.function_call_arguments.done"]
        assert done["arguments"] == "".join(argument_deltas)
        assert done["name"] == "get_weather"
    else:
        response = http.post(ROUTE, json=payload).json()
    assert response["tool_choice"] == "required"
    assert response["tools"] == [WEATHER_TOOL]
    [call] = response["output"]  # no text where a call is required; one call: parallel off
    assert call["type"] == "function_call"
    assert call["id"].startswith("fc_") and call["call_id"].startswith("call_")
    assert call["name"] == "get_weather" and call["status"] == "completed"
    if response["status"] == "completed":  # else max_output_tokens cut the arguments
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS["get_weather"])


@pytest.mark.every_engine
def test_sdk_function_tool_round_trip(openai_client: openai.OpenAI, model: str) -> None:
    """The call, its output sent back as function_call_output with the whole input, then an
    answer: no state kept on the node."""
    tools: Any = [WEATHER_TOOL]
    first = openai_client.responses.create(
        model=model,
        input=ASK_WEATHER,
        tools=tools,
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    if first.status == "completed":
        jsonschema.validate(json.loads(call.arguments), WEATHER_SCHEMA)
    history: Any = [
        {"role": "user", "content": ASK_WEATHER},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"},
    ]
    second = openai_client.responses.create(
        model=model, input=history, tools=tools, tool_choice="none",
        max_output_tokens=ANSWER_TOKENS,
    )  # fmt: skip
    assert second.status in ("completed", "incomplete")
    assert [item.type for item in second.output] == ["message"]
    assert second.usage is not None
    assert second.usage.input_tokens > (first.usage.input_tokens if first.usage else 0)


def test_async_client_streams(server: Any, model: str) -> None:
    async def run() -> list[str]:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        async with client:
            stream = await client.responses.create(
                model=model, input="Say hello.", max_output_tokens=8, stream=True
            )
            return [event.type async for event in stream]

    types = asyncio.run(run())
    assert types[0] == "response.created"
    assert types[-1] in ("response.completed", "response.incomplete")


def test_reasoning_comes_first_as_a_summary(http: httpx.Client, model: str) -> None:
    """reasoning.effort turns the thinking on: a reasoning item with its summary text first,
    its tokens counted in reasoning_tokens (all of the answer's, when max_output_tokens cuts
    the reasoning, as here: the effort's budget is 256)."""
    payload = body(model, input="Is 391 prime?", reasoning={"effort": "minimal"})
    for stream in (False, True):
        if stream:
            received = stream_events(http, {**payload, "max_output_tokens": 24})
            names = [name for name, _ in received]
            assert names[2:5] == [
                "response.output_item.added",
                "response.reasoning_summary_part.added",
                "response.reasoning_summary_text.delta",
            ]
            response = received[-1][1]["response"]
            deltas = [
                d["delta"] for n, d in received if n == "response.reasoning_summary_text.delta"
            ]
            assert response["output"][0]["summary"][0]["text"] == "".join(deltas)
        else:
            response = http.post(ROUTE, json={**payload, "max_output_tokens": 24}).json()
        assert response["status"] == "incomplete"
        [reasoning] = response["output"]
        assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
        [summary] = reasoning["summary"]
        assert summary["type"] == "summary_text" and summary["text"]
        assert response["reasoning"] == {"effort": "minimal", "summary": None}
        usage = response["usage"]
        assert usage["output_tokens_details"]["reasoning_tokens"] == usage["output_tokens"] == 24

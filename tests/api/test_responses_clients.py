"""The Responses API's own Node clients, unchanged, against the server: the OpenAI SDK's raw
stream and its `responses.stream` helper (which rebuilds the response from the events, and throws
on one out of order), and the Vercel AI SDK's OpenAI provider (generateText's tool loop,
generateObject). Asserted: the protocol's shape, and what constraints guarantee; never what the
model says."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from tests.node_script import run_script
from tests.server_process import ServerProcess

ENDS = ("response.completed", "response.incomplete")
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def assert_event_order(run: dict[str, Any]) -> None:
    """response.created (0), in_progress, then each item's added, its deltas, its done, items one
    after another; sequence numbers 0, 1, 2...; the last event completed or incomplete, its
    response's status the same, its output the items done."""
    types, numbers, indexes = run["types"], run["sequence_numbers"], run["output_indexes"]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert numbers == list(range(len(types)))
    assert types[-1] in ENDS
    assert run["response"]["status"] == types[-1].removeprefix("response.")
    items = [(t, i) for t, i in zip(types, indexes, strict=True) if i is not None]
    assert all(t not in ENDS and t.startswith("response.") for t in types[1:-1])
    done = 0
    for index in sorted({i for _, i in items}):
        events = [t for t, i in items if i == index]
        assert events[0] == "response.output_item.added"
        assert events[-1] == "response.output_item.done"
        assert events.count("response.output_item.added") == 1
        assert events.count("response.output_item.done") == 1
        first = next(n for n, (_, i) in enumerate(items) if i == index)
        assert first == done, "an item opened before the one before it was done"
        done = first + len(events)
    assert sorted({i for _, i in items}) == list(range(len(run["response"]["output"])))


def assert_call(arguments: str, response: dict[str, Any]) -> dict[str, Any]:
    """A complete answer's call has arguments valid for the schema; a cut one, the reason."""
    if response["status"] == "incomplete":
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}
        return {}
    parsed: dict[str, Any] = json.loads(arguments)
    jsonschema.validate(parsed, WEATHER_SCHEMA)
    return parsed


@pytest.fixture(scope="module")
def openai_stream(server: ServerProcess, model: str) -> dict[str, Any]:
    return run_script("responses_stream.mjs", server, model)


@pytest.fixture(scope="module")
def vercel(server: ServerProcess, model: str) -> dict[str, Any]:
    return run_script("vercel_ai.mjs", server, model)


def test_the_openai_node_sdks_raw_stream(openai_stream: dict[str, Any], model: str) -> None:
    raw = openai_stream["raw"]
    assert_event_order(raw)
    assert openai_stream["requests"][0]["body"] == {
        "model": model,
        "input": "Count from 1 to 5.",
        "max_output_tokens": 16,
        "stream": True,
    }
    response = raw["response"]
    assert response["object"] == "response" and response["store"] is True  # the default
    assert response["max_output_tokens"] == 16
    assert response["usage"]["output_tokens"] <= 16
    if not response["output"]:  # no text at all: nothing between the lifecycle events
        assert len(raw["types"]) == 3
        return
    [message] = response["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["status"] == response["status"]
    assert [part["type"] for part in message["content"]] == ["output_text"]
    assert raw["types"][2:4] == ["response.output_item.added", "response.content_part.added"]
    assert set(raw["types"][4:-4]) <= {"response.output_text.delta"}
    assert raw["types"][-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]


def test_the_openai_node_sdks_stream_helper_on_a_required_call(
    openai_stream: dict[str, Any],
) -> None:
    """finalResponse() took the events in order (it throws on one it cannot place); a required
    choice with one call per answer: one function_call item, its arguments the schema's."""
    helper = openai_stream["helper"]
    assert_event_order(helper)
    assert openai_stream["requests"][1]["body"]["stream"] is True
    response = helper["response"]
    [call] = response["output"]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert call["call_id"] and call["id"] != call["call_id"]
    assert set(helper["types"][3:-3]) <= {"response.function_call_arguments.delta"}
    assert helper["types"][-3:-1] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    parsed = assert_call(call["arguments"], response)
    if parsed:
        assert call["parsed_arguments"] == parsed  # the helper parsed the strict tool's call


def test_the_vercel_ai_sdks_tool_loop(vercel: dict[str, Any]) -> None:
    """Step 1 must call the tool, step 2 must not; the result of step 1's call goes back."""
    requests = vercel["requests"]
    assert all(request["url"].endswith("/v1/infer/responses") for request in requests)
    first, second = vercel["steps"]
    [call] = first["toolCalls"]
    assert call["toolName"] == "get_weather"
    assert requests[0]["body"]["tool_choice"] == "required"
    assert first["finishReason"] in ("tool-calls", "length")
    if first["finishReason"] == "tool-calls":
        jsonschema.validate(call["input"], WEATHER_SCHEMA)
        assert vercel["calls"] == [call["input"]]  # the SDK validated it and ran the tool
    body = requests[1]["body"]
    assert body["tool_choice"] == "none"
    kinds = [item.get("type") for item in body["input"]]
    assert kinds[-2:] == ["function_call", "function_call_output"]
    assert body["input"][-2]["call_id"] == body["input"][-1]["call_id"]
    assert second["toolCalls"] == []
    assert second["finishReason"] in ("stop", "length")


def test_the_vercel_ai_sdks_generate_object(vercel: dict[str, Any]) -> None:
    body = vercel["requests"][-1]["body"]
    form = body["text"]["format"]
    assert form["type"] == "json_schema" and form["strict"] is True
    assert vercel["object"]["finishReason"] == "stop"
    jsonschema.validate(vercel["object"]["object"], form["schema"])

"""The OpenAI Agents SDK, run for real: an agent with a function tool, on the SDK's default model
class (OpenAIResponsesModel, so POST /responses), to its final answer. The SDK needs openai>=3,
so it runs in tests/agents/.venv (make builds it from tests/agents/requirements.txt) as
tests/agents/agent_run.py, which says why the run ends whatever the model says: what is checked
here is what the SDK sent, what the node answered, and what the constraints guarantee, never
what the model said."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import httpx

from tests.conftest import repo_root
from tests.server_process import ServerProcess


def run_agent(server: ServerProcess, model: str, *mode: str) -> dict[str, Any]:
    python = repo_root() / "tests/agents/.venv/bin/python"
    assert python.exists(), "no Agents SDK environment: make tests/agents/.venv/.installed"
    script = str(repo_root() / "tests/agents/agent_run.py")
    done = subprocess.run(
        [str(python), script, server.base_url, model, *mode],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo_root(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_an_agent_runs_its_tool_to_a_final_answer(server: ServerProcess, model: str) -> None:
    result = run_agent(server, model)
    exchanges = result["exchanges"]
    assert [(e["method"], e["path"], e["status_code"]) for e in exchanges] == [
        ("POST", "/v1/infer/responses", 200)
    ] * 2, exchanges  # the default model class speaks Responses, and nothing was refused
    first, second = exchanges

    # The first turn: a required choice without parallel calls is exactly one call of the tool,
    # its arguments those of the tool's schema, and the SDK ran the tool on them.
    sent = first["request"]
    assert sent["tool_choice"] == "required" and sent["parallel_tool_calls"] is False
    [tool] = sent["tools"]
    [call] = first["response"]["output"]
    assert call["type"] == "function_call" and call["name"] == tool["name"] == "get_weather"
    arguments = json.loads(call["arguments"])
    schema = tool["parameters"]
    assert set(arguments) == set(schema["required"]) == set(schema["properties"]) == {"city"}
    assert isinstance(arguments["city"], str)
    assert len(arguments["city"]) <= schema["properties"]["city"]["maxLength"]
    assert result["calls"] == [arguments]

    # The second turn: the call and its output went back in the input; the tool was off and the
    # choice reset, so the answer is one message, JSON of the output type's schema.
    sent = second["request"]
    assert sent["tools"] == [] and "tool_choice" not in sent
    call_id = call["call_id"]
    assert [item.get("type") for item in sent["input"]] == [
        None,  # the user's message, as a role and content
        "function_call",
        "function_call_output",
    ]
    assert sent["input"][1]["call_id"] == sent["input"][2]["call_id"] == call_id
    assert sent["input"][1]["arguments"] == call["arguments"]
    [message] = second["response"]["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    [part] = message["content"]
    assert part["type"] == "output_text"
    answer = json.loads(part["text"])
    form = sent["text"]["format"]
    assert form["type"] == "json_schema" and set(answer) == {"response"}
    assert len(answer["response"]) <= form["schema"]["properties"]["response"]["maxLength"]

    assert result["items"] == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert result["final_output_is_str"] and result["final_output"] == answer["response"]

    # Every response completed (the SDK raises on any other status) with its usage, which is
    # what the SDK counted.
    assert [r["id"] for r in result["raw_responses"]] == [e["response"]["id"] for e in exchanges]
    for exchange, recorded in zip(exchanges, result["raw_responses"], strict=True):
        response = exchange["response"]
        assert response["object"] == "response" and response["status"] == "completed"
        assert response["store"] is True and response["error"] is None  # the SDK sends none
        usage = response["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
        assert recorded["usage"] == {
            "requests": 1,
            "input_tokens": usage["input_tokens"],
            "output_tokens": usage["output_tokens"],
            "total_tokens": usage["total_tokens"],
        }


def test_the_sdks_own_chaining_continues_a_kept_response(server: ServerProcess, model: str) -> None:
    """`auto_previous_response_id`, then `previous_response_id`: the second run sends only its
    own ask, and the node answers it with the whole conversation's prompt."""
    result = run_agent(server, model, "conversation")
    first, second = result["exchanges"]
    assert [e["status_code"] for e in (first, second)] == [200, 200], result
    assert result["response_ids"] == [first["response"]["id"], second["response"]["id"]]
    sent = second["request"]
    assert sent["previous_response_id"] == first["response"]["id"]
    assert [item["content"] for item in sent["input"]] == ["What is my name?"]
    assert second["response"]["previous_response_id"] == first["response"]["id"]
    # The prompt is the whole conversation's: counted as if sent whole.
    whole = {
        key: value
        for key, value in sent.items()
        if key not in ("previous_response_id", "stream", "max_output_tokens", "include")
    }
    whole["input"] = [*first["request"]["input"], *first["response"]["output"], *sent["input"]]
    with httpx.Client(base_url=server.origin, timeout=60) as client:
        counted = client.post("/v1/infer/responses/input_tokens", json=whole)
    assert counted.status_code == 200, counted.text
    assert counted.json()["input_tokens"] == second["response"]["usage"]["input_tokens"]

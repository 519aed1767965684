"""Client libraries' own tool helpers, unchanged, against the server: both Anthropic SDKs' tool
runners with their defaults (they ask for a server-held thread first, and fall back to sending
the whole conversation on the refusal's `thread_unsupported_request`), and instructor's default
mode, which rests on a named tool choice yielding exactly one call."""

from __future__ import annotations

import anthropic
import httpx
import instructor
import openai
from pydantic import BaseModel

from tests.node_script import run_script
from tests.server_process import ServerProcess

WEATHER = [{"role": "user", "content": "What is the weather in Oslo?"}]


def test_the_thread_refusal_carries_the_code_the_sdks_fall_back_on(
    http: httpx.Client, model: str
) -> None:
    body = {"model": model, "max_tokens": 4, "messages": WEATHER, "thread": {"type": "create"}}
    refused = http.post("/v1/infer/v1/messages", json=body)
    assert refused.status_code == 400
    error = refused.json()
    assert error["b3os"] == {"code": "unsupported_parameter", "param": "thread"}
    assert error["error"]["details"] == {"error_code": "thread_unsupported_request"}


def thread_refusals(http: httpx.Client) -> float:
    """Requests refused for `thread`, from /metrics."""
    text = http.get("/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("b3os_infer_requests_total{")
        and 'code="unsupported_parameter"' in line
        and "/v1/messages" in line
    )


def test_the_python_sdks_tool_runner_with_its_defaults(
    anthropic_client: anthropic.Anthropic, http: httpx.Client, model: str
) -> None:
    calls: list[str] = []

    @anthropic.beta_tool
    def get_weather(city: str) -> str:
        """Current weather for a city.

        Args:
            city: the city
        """
        calls.append(city)
        return "Sunny, 21 C"

    refusals = thread_refusals(http)
    runner = anthropic_client.beta.messages.tool_runner(
        model=model,
        max_tokens=200,
        messages=WEATHER,  # type: ignore[arg-type]
        tools=[get_weather],
        # One call: the runner runs tools only on stop_reason tool_use, and the 135M model may
        # repeat a parallel call to max_tokens.
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        max_iterations=2,
        extra_body={"temperature": 0},  # the SDK no longer types it
    )
    replies = list(runner)
    assert thread_refusals(http) == refusals + 1  # it asked for a thread once, then fell back
    assert len(calls) >= 1 and all(isinstance(city, str) for city in calls)
    assert [reply.stop_reason for reply in replies][:1] == ["tool_use"]
    assert len(replies) == 2  # the tool's result went back, and was answered


def test_the_node_sdks_tool_runner_with_its_defaults(
    server: ServerProcess, http: httpx.Client, model: str
) -> None:
    refusals = thread_refusals(http)
    result = run_script("tool_runner.mjs", server, model)
    assert thread_refusals(http) == refusals + 1
    assert result["calls"] and all(isinstance(call["city"], str) for call in result["calls"])
    assert result["replies"][0]["stop_reason"] == "tool_use"
    assert len(result["replies"]) == 2


class City(BaseModel):
    name: str
    country: str


def test_instructors_default_mode_returns_its_object(
    openai_client: openai.OpenAI, model: str
) -> None:
    """Mode.TOOLS: a named tool choice with parallel calls on; one call, its object."""
    client = instructor.from_openai(openai_client)
    assert client.mode is instructor.Mode.TOOLS
    city = client.chat.completions.create(
        model=model,
        response_model=City,
        messages=[{"role": "user", "content": "Name a city in France."}],
        max_tokens=200,
        temperature=0,
        max_retries=0,
    )
    assert isinstance(city, City)

"""The OpenAI Agents SDK running an agent with a function tool to its final answer against the
node, on the SDK's default model class, OpenAIResponsesModel (POST /responses). It runs in its
own environment, tests/agents/.venv (the SDK needs openai>=3; .venv's is SGLang's 2.8.0):

    tests/agents/.venv/bin/python tests/agents/agent_run.py BASE_URL MODEL [conversation]

and prints one JSON line: the tool's calls, the run's new items, its final output, the SDK's
record of each model response, and every request the SDK sent with the node's answer to it
(tests/api/test_responses_agents.py checks them).

The run ends whatever the model says, on what the node's grammars guarantee. The SDK raises on
a response that is not completed (one cut at max_output_tokens included), so each turn's output
is bounded: the first turn's tool_choice "required" with parallel_tool_calls false is exactly
one call of the tool, its one argument at most 16 characters; then the tool turns itself off
(is_enabled) and the SDK resets the tool choice (reset_tool_choice), so the second turn can only
answer, and its answer is a string of at most 60 characters (an output type: the SDK asks for
JSON {"response": ...} and hands back the string). The agent's settings are otherwise the
SDK's defaults, so what it sends is what any agent sends.

`conversation`: the SDK's own chaining instead, two runs of an agent without tools, the first
with `auto_previous_response_id`, the second continuing it with `previous_response_id` (the
node keeps responses): what was sent and answered, and each run's last response id.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

import httpx2
from agents import (
    Agent,
    ModelSettings,
    MultiProvider,
    RunConfig,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from pydantic import Field

PROMPT = "What is the weather in Oslo?"
calls: list[dict[str, Any]] = []
exchanges: list[dict[str, Any]] = []  # each request the SDK sent, with the node's answer


async def on_request(request: httpx2.Request) -> None:
    exchanges.append(
        {
            "method": request.method,
            "path": request.url.path,
            "request": json.loads(request.content) if request.content else None,
        }
    )


async def on_response(response: httpx2.Response) -> None:
    await response.aread()
    exchange = exchanges[-1]
    exchange["status_code"] = response.status_code
    try:
        exchange["response"] = response.json()
    except ValueError:
        exchange["response"] = response.text


def tool_unused(*_: Any) -> bool:
    """The tool is offered until it has run once: then the model can only answer."""
    return not calls


@function_tool(is_enabled=tool_unused)
def get_weather(city: Annotated[str, Field(max_length=16)]) -> str:
    """Current weather for a city.

    Args:
        city: the city's name
    """
    calls.append({"city": city})
    return f"Sunny, 21 C in {city}"


def use_node(base_url: str) -> None:
    """The SDK's default client: the node, every exchange recorded, no retries, no tracing."""
    http_client = DefaultAsyncHttpxClient(
        event_hooks={"request": [on_request], "response": [on_response]}
    )
    client = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, http_client=http_client)
    set_default_openai_client(client)
    set_tracing_disabled(True)


async def main(base_url: str, model: str) -> None:
    use_node(base_url)
    agent = Agent(
        name="weather",
        instructions="Answer with the weather the get_weather tool reports.",
        model=model,  # a name: the default provider's default model class, Responses
        tools=[get_weather],
        output_type=Annotated[str, Field(max_length=60)],
        model_settings=ModelSettings(
            tool_choice="required",  # the first turn; reset once the tool ran
            parallel_tool_calls=False,
            temperature=0,
            max_tokens=128,
        ),
    )
    # The model's id is namespaced ("b3os/..."): sent as it is, not read as a provider prefix.
    provider = MultiProvider(unknown_prefix_mode="model_id")
    try:
        result = await Runner.run(
            agent, PROMPT, max_turns=3, run_config=RunConfig(model_provider=provider)
        )
    except Exception:
        print(json.dumps({"calls": calls, "exchanges": exchanges}), file=sys.stderr)
        raise
    report = {
        "calls": calls,
        "items": [item.type for item in result.new_items],
        "final_output": result.final_output,
        "final_output_is_str": isinstance(result.final_output, str),
        "raw_responses": [
            {
                "id": response.response_id,
                "usage": {
                    "requests": response.usage.requests,
                    "input_tokens": response.usage.input_tokens,
                    "output_tokens": response.usage.output_tokens,
                    "total_tokens": response.usage.total_tokens,
                },
            }
            for response in result.raw_responses
        ],
        "exchanges": exchanges,
    }
    print(json.dumps(report))


async def conversation(base_url: str, model: str) -> None:
    use_node(base_url)
    agent = Agent(
        name="chat",
        instructions="Answer in a few words.",
        model=model,
        output_type=Annotated[str, Field(max_length=40)],  # ends within max_tokens
        model_settings=ModelSettings(temperature=0, max_tokens=128),
    )
    config = RunConfig(model_provider=MultiProvider(unknown_prefix_mode="model_id"))
    first = await Runner.run(
        agent, "My name is Ada.", run_config=config, auto_previous_response_id=True
    )
    second = await Runner.run(
        agent, "What is my name?", run_config=config, previous_response_id=first.last_response_id
    )
    ids = [first.last_response_id, second.last_response_id]
    print(json.dumps({"response_ids": ids, "exchanges": exchanges}))


if __name__ == "__main__":
    if sys.argv[3:] == ["conversation"]:
        asyncio.run(conversation(sys.argv[1], sys.argv[2]))
    else:
        asyncio.run(main(sys.argv[1], sys.argv[2]))

"""JSON answers under a grammar, through the real server and both SDKs: what comes back parses
and validates against the schema (bounded so a tiny model's answer fits in max_tokens)."""

from __future__ import annotations

import json
from typing import Any, Literal

import anthropic
import jsonschema
import openai
import pydantic
import pytest

from tests.api.test_tools import ANTHROPIC_TOOLS, ASK, SCHEMAS

CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 30},
        "population_millions": {"type": "integer", "minimum": 0, "maximum": 50},
        "coastal": {"type": "boolean"},
    },
    "required": ["city", "population_millions", "coastal"],
    "additionalProperties": False,
}
QUESTION = [{"role": "user", "content": "Describe Lisbon as JSON."}]


class City(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=30)
    size: Literal["small", "medium", "large"]
    coastal: bool


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_chat_json_schema_answers_validate(
    openai_client: openai.OpenAI, model: str, stream: bool
) -> None:
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": 80,
        "temperature": 0,
        "messages": QUESTION,
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}},
    }
    if stream:
        chunks = openai_client.chat.completions.create(**kwargs, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = openai_client.chat.completions.create(**kwargs).choices[0].message.content or ""
    jsonschema.validate(json.loads(text), CITY)


def test_chat_parse_helper_with_a_pydantic_model(openai_client: openai.OpenAI, model: str) -> None:
    completion = openai_client.chat.completions.parse(
        model=model, max_tokens=80, temperature=0, messages=QUESTION, response_format=City
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, City)


def test_chat_json_object_answers_are_objects(openai_client: openai.OpenAI, model: str) -> None:
    completion = openai_client.chat.completions.create(
        model=model,
        max_tokens=60,
        temperature=0,
        messages=QUESTION,
        response_format={"type": "json_object"},
    )
    choice = completion.choices[0]
    if choice.finish_reason == "stop":
        assert isinstance(json.loads(choice.message.content or ""), dict)
    else:  # cut by max_tokens: still an object's beginning
        assert (choice.message.content or "").lstrip().startswith("{")


@pytest.mark.every_engine
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_messages_output_format_answers_validate(
    anthropic_client: anthropic.Anthropic, model: str, stream: bool
) -> None:
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": 80,
        "messages": QUESTION,
        "output_config": {"format": {"type": "json_schema", "schema": CITY}},
        "extra_body": {"temperature": 0},
    }
    if stream:
        with anthropic_client.messages.stream(**kwargs) as s:
            text = "".join(s.text_stream)
            message = s.get_final_message()
    else:
        message = anthropic_client.messages.create(**kwargs)
        text = "".join(b.text for b in message.content if b.type == "text")
    assert message.stop_reason == "end_turn"
    jsonschema.validate(json.loads(text), CITY)


def test_auto_tools_with_a_json_format_answer_json_or_calls(
    anthropic_client: anthropic.Anthropic, model: str
) -> None:
    message = anthropic_client.messages.create(
        model=model,
        max_tokens=120,
        messages=ASK,
        tools=ANTHROPIC_TOOLS,
        output_config={"format": {"type": "json_schema", "schema": CITY}},
        extra_body={"temperature": 0},
    )
    calls = [b for b in message.content if b.type == "tool_use"]
    if calls:
        for call in calls[:-1] if message.stop_reason == "max_tokens" else calls:
            jsonschema.validate(call.input, SCHEMAS[call.name])
    else:
        jsonschema.validate(json.loads(message.content[0].text), CITY)  # type: ignore[union-attr]

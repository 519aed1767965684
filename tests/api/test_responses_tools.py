"""Custom tools (free-form input held to a Lark grammar or a regular expression) and namespaces on
the Responses API, through the official OpenAI SDK on the real server and model: created,
streamed, sent back; every sampled input checked against the grammar by an independent regular
expression; grammars xgrammar cannot compile refused with a 400 naming them."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import openai
import pytest

from tests.api.test_tools import WEATHER_SCHEMA

SAMPLES = 6  # sampled at temperature 1, at once
ZIP = {
    "type": "custom",
    "name": "zip_code",
    "description": "Look up a US ZIP code.",
    "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]{5}"},
}
DELETE = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Delete a file.",
    "format": {
        "type": "grammar",
        "syntax": "lark",
        "definition": 'start: "*** Begin Patch" LF "*** Delete File: " NAME LF "*** End Patch"\n'
        "NAME: /[a-z]{1,8}\\.txt/\n"
        "%import common.LF\n",
    },
}
# The same languages, written independently of the grammars above.
HOLDS = {
    "zip_code": re.compile(r"[0-9]{5}"),
    "apply_patch": re.compile(
        r"\*\*\* Begin Patch\n\*\*\* Delete File: [a-z]{1,8}\.txt\n\*\*\* End Patch"
    ),
}
CRM = {
    "type": "namespace",
    "name": "crm",
    "description": "The customer records.",
    "tools": [
        {"type": "function", "name": "find", "description": "Weather of a customer's city.",
         "parameters": WEATHER_SCHEMA, "strict": True},
        {"type": "custom", "name": "note", "description": "Add a note."},
    ],
}  # fmt: skip


def create(client: openai.OpenAI, model: str, tools: list[Any], **extra: Any) -> Any:
    # Under a grammar the model often writes a character per token: the patch takes about 60.
    return client.responses.create(
        model=model, input="Use the tool.", tools=tools, max_output_tokens=96, **extra
    )


@pytest.mark.parametrize("tool", [ZIP, DELETE], ids=["regex", "lark"])
def test_every_sampled_input_holds_to_the_grammar(
    openai_client: openai.OpenAI, model: str, tool: dict[str, Any]
) -> None:
    def sample(_: int) -> Any:
        return create(
            openai_client, model, [tool], temperature=1.0,
            tool_choice={"type": "custom", "name": tool["name"]},
        )  # fmt: skip

    with ThreadPoolExecutor(SAMPLES) as pool:
        responses = list(pool.map(sample, range(SAMPLES)))
    for response in responses:
        [call] = response.output
        assert call.type == "custom_tool_call" and call.name == tool["name"]
        assert call.id.startswith("ctc_") and call.call_id.startswith("call_")
        if response.status == "completed":
            assert HOLDS[tool["name"]].fullmatch(call.input), call.input
        else:  # cut by max_output_tokens: what was written is where the grammar led
            assert response.incomplete_details.reason == "max_output_tokens"
    assert any(response.status == "completed" for response in responses)


def test_a_namespaced_call_comes_back_with_its_namespace(
    openai_client: openai.OpenAI, model: str
) -> None:
    response = create(
        openai_client, model, [CRM], tool_choice={"type": "function", "name": "find"},
        temperature=0,
    )  # fmt: skip
    [call] = response.output
    assert call.type == "function_call" and call.name == "find"
    assert call.model_dump()["namespace"] == "crm"
    if response.status == "completed":
        jsonschema.validate(json.loads(call.arguments), WEATHER_SCHEMA)
    assert response.model_dump()["tools"][0]["type"] == "namespace"


def test_a_custom_call_streams_its_input(openai_client: openai.OpenAI, model: str) -> None:
    with openai_client.responses.stream(
        model=model, input="Use the tool.", tools=[ZIP], max_output_tokens=96,
        tool_choice={"type": "custom", "name": "zip_code"},
    ) as stream:  # fmt: skip
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    deltas = kinds.count("response.custom_tool_call_input.delta")
    assert deltas >= 1 and kinds.count("response.custom_tool_call_input.done") == 1
    assert "response.function_call_arguments.delta" not in kinds
    [call] = final.output
    assert call.type == "custom_tool_call" and HOLDS["zip_code"].fullmatch(call.input)


def test_calls_and_their_outputs_go_back_as_input(openai_client: openai.OpenAI, model: str) -> None:
    """A custom call and a namespaced one, sent back with their outputs and the whole input:
    the node keeps nothing."""
    tools: Any = [CRM, ZIP]
    first = create(openai_client, model, tools, tool_choice="required", temperature=0)
    second = create(
        openai_client, model, tools, tool_choice={"type": "custom", "name": "zip_code"},
        temperature=0,
    )  # fmt: skip
    calls = [*first.output, *second.output]
    outputs: list[Any] = [
        {"type": f"{call.type.removesuffix('_call')}_call_output", "call_id": call.call_id,
         "output": "Done."}
        for call in calls
    ]  # fmt: skip
    history: Any = [
        {"role": "user", "content": "Use the tool."},
        *[call.model_dump(exclude_none=True) for call in calls],
        *outputs,
    ]
    answer = openai_client.responses.create(
        model=model, input=history, tools=tools, tool_choice="none", max_output_tokens=8
    )
    assert [item.type for item in answer.output] == ["message"]
    assert answer.usage is not None and first.usage is not None
    assert answer.usage.input_tokens > first.usage.input_tokens


@pytest.mark.parametrize(
    ("syntax", "definition"),
    [("lark", "start: undefined_rule"), ("regex", "a(?=b)"), ("regex", "(")],
)
def test_a_grammar_that_cannot_be_compiled_is_a_400_naming_it(
    openai_client: openai.OpenAI, model: str, syntax: str, definition: str
) -> None:
    tool = {**ZIP, "format": {"type": "grammar", "syntax": syntax, "definition": definition}}
    with pytest.raises(openai.BadRequestError) as raised:
        create(openai_client, model, [tool])
    error: Any = raised.value.body
    assert error["param"] == "tools.0.format.definition", error
    assert "cannot be compiled into a grammar" in error["message"], error

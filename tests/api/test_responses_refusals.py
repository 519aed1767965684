"""What POST /v1/infer/responses refuses, each with its exact error in OpenAI's shape: what
needs state the node does not keep, OpenAI's built-in tools, members the node does not take,
and malformed input. All refused by the decoder, before any engine work."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

ROUTE = "/v1/infer/responses"
STATELESS = (
    "this node keeps no conversation objects; send the whole conversation as input, or "
    "continue a stored response with previous_response_id"
)
UNSUPPORTED = ("unsupported_parameter", "invalid_request_error")
INVALID = ("invalid_request", "invalid_request_error")
TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}

# (what the body adds, the code and type, param, the message).
REFUSALS: dict[str, tuple[dict[str, Any], tuple[str, str], str, str]] = {
    "conversation": (
        {"conversation": "conv_1"},
        UNSUPPORTED,
        "conversation",
        f"conversation is not supported: {STATELESS}",
    ),
    "prompt": (
        {"prompt": {"id": "pmpt_1"}},
        UNSUPPORTED,
        "prompt",
        f"prompt is not supported: {STATELESS}",
    ),
    "background": (
        {"background": True},
        UNSUPPORTED,
        "background",
        "background: true is not supported: this node answers while the request is open; "
        "stream the response instead",
    ),
    "truncation": (
        {"truncation": "auto"},
        UNSUPPORTED,
        "truncation",
        "truncation: auto is not supported: this node never drops input; a conversation beyond "
        "the window is refused (truncation: disabled)",
    ),
    "max_tool_calls": (
        {"max_tool_calls": 2},
        UNSUPPORTED,
        "max_tool_calls",
        "max_tool_calls is not supported on this node; parallel_tool_calls: false allows one "
        "call per answer",
    ),
    "web_search": (
        {"tools": [{"type": "web_search"}]},
        UNSUPPORTED,
        "tools.0.type",
        "tools.0.type: web_search is one of OpenAI's hosted tools, which this node does not "
        "run; it takes tools of type function, custom and namespace",
    ),
    "file_search": (
        {"tools": [TOOL, {"type": "file_search", "vector_store_ids": ["vs_1"]}]},
        UNSUPPORTED,
        "tools.1.type",
        "tools.1.type: file_search is one of OpenAI's hosted tools, which this node does not "
        "run; it takes tools of type function, custom and namespace",
    ),
    "code_interpreter": (
        {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]},
        UNSUPPORTED,
        "tools.0.type",
        "tools.0.type: code_interpreter is one of OpenAI's hosted tools, which this node does "
        "not run; it takes tools of type function, custom and namespace",
    ),
    "computer_use": (
        {"tools": [{"type": "computer_use_preview", "display_width": 1024}]},
        UNSUPPORTED,
        "tools.0.type",
        "tools.0.type: computer_use_preview is one of OpenAI's hosted tools, which this node "
        "does not run; it takes tools of type function, custom and namespace",
    ),
    "mcp": (
        {"tools": [{"type": "mcp", "server_label": "x", "server_url": "https://x"}]},
        UNSUPPORTED,
        "tools.0.type",
        "tools.0.type: mcp is one of OpenAI's hosted tools, which this node does not run; it "
        "takes tools of type function, custom and namespace",
    ),
    "a built-in tool choice": (
        {"tools": [TOOL], "tool_choice": {"type": "web_search_preview"}},
        UNSUPPORTED,
        "tool_choice.type",
        "tool_choice.type: web_search_preview is not supported on this node; it takes none, "
        "auto, required, {type: function, name} or {type: custom, name}",
    ),
    "a named tool not listed": (
        {"tools": [TOOL], "tool_choice": {"type": "function", "name": "g"}},
        INVALID,
        "tool_choice.name",
        "tool_choice.name: g is not one of the functions in tools",
    ),
    "required without tools": (
        {"tool_choice": "required"},
        INVALID,
        "tool_choice",
        "tool_choice required needs tools",
    ),
    "include": (
        {"include": ["file_search_call.results"]},
        UNSUPPORTED,
        "include.0",
        "include.0: 'file_search_call.results' cannot be included on this node (it includes "
        "message.output_text.logprobs, reasoning.encrypted_content)",
    ),
    "stop": ({"stop": ["\n"]}, UNSUPPORTED, "stop", "stop is not supported on this node"),
    "an unknown member": (
        {"frequency_penalty": 1},
        UNSUPPORTED,
        "frequency_penalty",
        "frequency_penalty is not supported on this node",
    ),
    "an item reference": (
        {"input": [{"type": "item_reference", "id": "msg_1"}]},
        UNSUPPORTED,
        "input.0.type",
        f"input.0: item references need stored items; {STATELESS}",
    ),
    "a built-in tool's item": (
        {"input": [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]},
        UNSUPPORTED,
        "input.0.type",
        "input.0.type: web_search_call items are not taken on this node (it takes message, "
        "function_call, function_call_output, custom_tool_call, custom_tool_call_output, "
        "reasoning)",
    ),
    "a file part": (
        {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
        INVALID,
        "input.0.content.0.type",
        "input.0.content.0.type: input_file parts are not taken in this message (it takes "
        "input_text, input_image)",
    ),
    "an image by file id": (
        {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]},
        UNSUPPORTED,
        "input.0.content.0.file_id",
        "input.0.content.0.file_id: this node has no file store; send image_url (an https:// "
        "or data: URL)",
    ),
    "an image over http": (
        {
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_image", "image_url": "http://example.com/a.png"}],
                }
            ]
        },
        INVALID,
        "input.0.content.0.image_url",
        "input.0.content.0.image_url must be an https:// URL",
    ),
    "output text from the user": (
        {"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]},
        INVALID,
        "input.0.content.0.type",
        "input.0.content.0.type: output_text parts are not taken in this message (it takes "
        "input_text, input_image)",
    ),
    "a tool role": (
        {"input": [{"role": "tool", "content": "x"}]},
        INVALID,
        "input.0.role",
        "input.0.role must be one of: system, developer, user, assistant",
    ),
    "no input": ({"input": None}, INVALID, "input", "input is required"),
    "empty input": ({"input": []}, INVALID, "input", "input must have at least one item"),
    "input of a number": (
        {"input": 3},
        INVALID,
        "input",
        "input must be a string or an array of items, not a number",
    ),
    "reasoning without text only": (
        {"input": [{"type": "reasoning", "summary": []}]},
        INVALID,
        "input",
        "input has no message or call to answer",
    ),
    "a call output without its call id": (
        {"input": [{"type": "function_call_output", "output": "x"}]},
        INVALID,
        "input.0.call_id",
        "input.0.call_id is required",
    ),
    "a json schema without its schema": (
        {"text": {"format": {"type": "json_schema", "name": "x"}}},
        INVALID,
        "text.format.schema",
        "text.format.schema is required",
    ),
    "a temperature too high": (
        {"temperature": 3},
        INVALID,
        "temperature",
        "temperature must be between 0 and 2",
    ),
    "an unknown effort": (
        {"reasoning": {"effort": "max"}},
        INVALID,
        "reasoning.effort",
        "reasoning.effort must be one of: none, minimal, low, medium, high, xhigh",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refused_with_its_exact_error(http: httpx.Client, model: str, case: str) -> None:
    added, (code, kind), param, message = REFUSALS[case]
    payload = {"model": model, "input": "Hi", "max_output_tokens": 4, **added}
    payload = {key: value for key, value in payload.items() if value is not None}
    response = http.post(ROUTE, json=payload)
    assert response.status_code == 400, response.text
    assert response.json() == {
        "error": {"message": message, "type": kind, "param": param, "code": code}
    }


def test_a_model_not_served(http: httpx.Client) -> None:
    response = http.post(ROUTE, json={"model": "gpt-5", "input": "Hi"})
    assert response.status_code == 404
    assert response.json()["error"] == {
        "message": "gpt-5 is not served on this node; GET /v1/infer/models lists the models "
        "that are",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_available",
    }


def test_settings_meaning_keep_nothing_are_taken(http: httpx.Client, model: str) -> None:
    """store false, background false, truncation disabled, null for what needs state, and the
    accepted settings: answered, and repeated in the response (client_metadata, ignored, is
    not: OpenAI's response has no such member)."""
    payload = {
        "model": model,
        "input": "Hi",
        "max_output_tokens": 4,
        "store": False,
        "background": False,
        "truncation": "disabled",
        "previous_response_id": None,
        "service_tier": "auto",
        "user": "u-1",
        "safety_identifier": "s-1",
        "prompt_cache_key": "k-1",
        "client_metadata": {"client": "an agent"},  # Codex CLI sends it on every request
        "include": ["reasoning.encrypted_content"],
        "text": {"format": {"type": "text"}, "verbosity": "low"},
        "stream_options": {"include_obfuscation": False},
    }
    response = http.post(ROUTE, json=payload)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["service_tier"] == "auto" and data["user"] == "u-1"
    assert data["safety_identifier"] == "s-1" and data["prompt_cache_key"] == "k-1"
    assert data["text"] == {"format": {"type": "text"}, "verbosity": "low"}
    assert "client_metadata" not in data


def test_models_list_the_protocols(http: httpx.Client) -> None:
    [card] = http.get("/v1/infer/models").json()["data"]
    assert card["protocols"] == ["messages", "chat.completions", "responses"]

"""The canonical request -> the Chat Completions body the gateway is sent: what the client asked
(validated by the node's contract first), always streamed with usage so the node sees each
output and the upstream's own count; the node's extensions only where the client set them."""

from __future__ import annotations

import base64
from typing import Any

from server.canonical import (
    GenerateRequest,
    Image,
    Message,
    Sampling,
    Text,
    ThinkingMode,
    ToolCall,
    ToolChoiceKind,
    ToolResult,
)
from server.protocols.openai.encode import CALL_PREFIX

# What the upstream's JSON Schema format is named: the canonical format keeps no name.
SCHEMA_NAME = "response"


def chat_body(request: GenerateRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_message(message) for message in request.messages],
        "stream": True,
        "stream_options": {"include_usage": True},
        **_sampling(request.sampling),
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    **({"description": tool.description} if tool.description else {}),
                    "parameters": tool.input_schema,
                    **({"strict": True} if tool.strict else {}),
                },
            }
            for tool in request.tools
        ]
        body["tool_choice"] = _tool_choice(request)
        if not request.tool_choice.parallel:
            body["parallel_tool_calls"] = False
    form = request.response_format
    if form is not None and form.kind == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif form is not None:
        schema = {"name": SCHEMA_NAME, "schema": form.schema, "strict": True}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    if request.thinking.mode is not ThinkingMode.DISABLED:
        body["chat_template_kwargs"] = {"enable_thinking": True}
    return body


def _sampling(sampling: Sampling) -> dict[str, Any]:
    taken: dict[str, Any] = {
        "max_completion_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "min_p": sampling.min_p,
        "seed": sampling.seed,
        "stop": list(sampling.stop) or None,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "repetition_penalty": sampling.repetition_penalty,
        "logit_bias": None
        if sampling.logit_bias is None
        else {str(token): bias for token, bias in sampling.logit_bias.items()},
        "logprobs": sampling.logprobs or None,
        "top_logprobs": sampling.top_logprobs,
    }
    return {key: value for key, value in taken.items() if value is not None}


def _tool_choice(request: GenerateRequest) -> Any:
    choice = request.tool_choice
    if choice.kind is ToolChoiceKind.NAMED:
        return {"type": "function", "function": {"name": choice.name}}
    return {"auto": "auto", "none": "none", "any": "required"}[choice.kind.value]


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        [result] = [part for part in message.parts if isinstance(part, ToolResult)]
        text = "".join(part.text for part in result.parts if isinstance(part, Text))
        return {"role": "tool", "tool_call_id": result.tool_call_id, "content": text}
    if message.role == "assistant":
        calls = [part for part in message.parts if isinstance(part, ToolCall)]
        wire: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if calls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in calls
            ]
        return wire  # earlier reasoning is the node's extension: not sent on
    images = [part for part in message.parts if isinstance(part, Image)]
    if not images:
        return {"role": message.role, "content": message.text}
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, Text):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, Image):
            parts.append({"type": "image_url", "image_url": {"url": _image_url(part)}})
    return {"role": message.role, "content": parts}


def _image_url(image: Image) -> str:
    if image.url is not None:
        return image.url
    assert image.data is not None
    return f"data:{image.media_type};base64,{base64.b64encode(image.data).decode()}"


def call_id(upstream_id: str) -> str:
    """The canonical id of a call the upstream named: the encoders add `call_` again."""
    return upstream_id.removeprefix(CALL_PREFIX)

"""POST /v1/infer/chat/completions through the official OpenAI SDK and raw httpx, on the real
server and model. Assertions are on protocol shape, never on what the model says."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.api.conventions import COUNTING, assert_b3os, assert_ids, server_timing
from tests.api.sse import events

HELLO = [{"role": "user", "content": "Say hello."}]
FINISH_REASONS = {"stop", "length"}


def chat_body(model: str, **overrides: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 8, "messages": HELLO, **overrides}


def test_sdk_creates_a_completion(openai_client: openai.OpenAI, model: str) -> None:
    completion = openai_client.chat.completions.create(model=model, max_tokens=8, messages=HELLO)
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    assert completion.model == model
    assert isinstance(completion.created, int)
    [choice] = completion.choices
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in FINISH_REASONS
    usage = completion.usage
    assert usage is not None
    assert 0 < usage.completion_tokens <= 8
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.mark.every_engine
def test_sdk_stream_with_usage(openai_client: openai.OpenAI, model: str) -> None:
    stream = openai_client.chat.completions.create(
        model=model,
        max_tokens=10,
        messages=HELLO,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    *content_chunks, usage_chunk = chunks
    assert content_chunks[0].choices[0].delta.role == "assistant"
    assert content_chunks[-1].choices[0].finish_reason in FINISH_REASONS
    assert all(c.choices[0].finish_reason is None for c in content_chunks[:-1])
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert 0 < usage_chunk.usage.completion_tokens <= 10
    assert all(c.usage is None for c in content_chunks)


def test_raw_stream_usage_null_extension_and_done(http: httpx.Client, model: str) -> None:
    body = chat_body(model, stream=True, stream_options={"include_usage": True})
    with http.stream("POST", "/v1/infer/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert "ttft" in server_timing(response)
        received = [data for _, data in events(response)]
    assert received[-1] == "[DONE]"
    chunks = received[:-1]
    assert all("usage" in c for c in chunks)
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["usage"]["total_tokens"] > 0
    assert_b3os(chunks[-1]["b3os"], streamed=True)
    assert all("b3os" not in c for c in chunks[:-1])


def test_raw_stream_without_usage(http: httpx.Client, model: str) -> None:
    with http.stream("POST", "/v1/infer/chat/completions", json=chat_body(model, stream=True)) as r:
        received = [data for _, data in events(r)]
    assert received[-1] == "[DONE]"
    chunks = received[:-1]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in FINISH_REASONS
    assert_b3os(chunks[-1]["b3os"], streamed=True)


@pytest.mark.every_engine
def test_length_finish(openai_client: openai.OpenAI, model: str) -> None:
    completion = openai_client.chat.completions.create(
        model=model, max_tokens=50, max_completion_tokens=3, temperature=0, messages=COUNTING
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 3


@pytest.mark.every_engine
def test_stop_string_finishes_with_stop_and_is_left_out(
    openai_client: openai.OpenAI, model: str
) -> None:
    completion = openai_client.chat.completions.create(
        model=model, max_tokens=20, temperature=0, messages=COUNTING, stop=[","]
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert "," not in (choice.message.content or "")


@pytest.mark.every_engine
def test_prefix_cache_reports_cached_tokens(http: httpx.Client, model: str) -> None:
    system = {"role": "system", "content": "You answer in one word. " * 40}
    body = chat_body(model, max_tokens=1, messages=[system, *HELLO])
    http.post("/v1/infer/chat/completions", json=body).raise_for_status()
    usage = http.post("/v1/infer/chat/completions", json=body).json()["usage"]
    assert 0 < usage["prompt_tokens_details"]["cached_tokens"] < usage["prompt_tokens"]


def test_json_answer_headers_and_extension(http: httpx.Client, model: str) -> None:
    response = http.post("/v1/infer/chat/completions", json=chat_body(model))
    request_id = assert_ids(response)
    body = response.json()
    assert body["id"] == "chatcmpl-" + request_id.removeprefix("req_")
    assert "total" in server_timing(response)
    assert_b3os(body["b3os"], streamed=False)


def test_unknown_model_is_404_in_the_openai_shape(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        openai_client.chat.completions.create(model="gpt-5", messages=HELLO)
    body = raised.value.body
    assert isinstance(body, dict)
    assert set(body) == {"message", "type", "param", "code"}
    assert (body["type"], body["param"], body["code"]) == (
        "invalid_request_error",
        "model",
        "model_not_available",
    )
    assert "gpt-5" in body["message"]


def test_unsupported_parameter_is_named(openai_client: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.chat.completions.create(
            model=model, messages=HELLO, extra_body={"prompt_logprobs": 1}
        )
    assert raised.value.code == "unsupported_parameter"
    assert raised.value.param == "prompt_logprobs"


def test_only_assistant_messages_may_have_null_content(http: httpx.Client, model: str) -> None:
    messages = [{"role": "user", "content": None}]
    response = http.post("/v1/infer/chat/completions", json=chat_body(model, messages=messages))
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request", "messages.0.content")

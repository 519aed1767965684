"""POST /v1/infer/v1/messages through the official Anthropic SDK and raw httpx, on the real
server and model. Assertions are on protocol shape, never on what the model says."""

from __future__ import annotations

import re
import uuid
from typing import Any

import anthropic
import httpx
import pytest

from tests.api.contract import whole_prompt
from tests.api.conventions import COUNTING, assert_b3os, assert_ids, server_timing
from tests.api.sse import events

HELLO = [{"role": "user", "content": "Say hello."}]
STOP_REASONS = {"end_turn", "max_tokens", "stop_sequence"}
# The Anthropic SDK (2.x) no longer types temperature, top_p or top_k: they go in the body as is.
GREEDY = {"temperature": 0}


def messages_body(model: str, **overrides: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 8, "messages": HELLO, **overrides}


def test_sdk_creates_a_message(anthropic_client: anthropic.Anthropic, model: str) -> None:
    message = anthropic_client.messages.create(model=model, max_tokens=8, messages=HELLO)
    assert message.id.startswith("msg_")
    assert message.type == "message" and message.role == "assistant"
    assert message.model == model
    assert message.stop_reason in STOP_REASONS
    assert all(block.type == "text" for block in message.content)
    assert message.usage.input_tokens > 0
    assert 0 < message.usage.output_tokens <= 8
    assert message._request_id is not None
    assert message._request_id.startswith("req_")


def test_sdk_stream_helpers(anthropic_client: anthropic.Anthropic, model: str) -> None:
    with anthropic_client.messages.stream(model=model, max_tokens=12, messages=HELLO) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.content and final.content[0].type == "text"
    assert final.content[0].text == streamed
    assert final.stop_reason in STOP_REASONS
    assert final.usage.input_tokens > 0
    assert 0 < final.usage.output_tokens <= 12


@pytest.mark.every_engine
def test_raw_stream_sends_anthropic_events_in_order(http: httpx.Client, model: str) -> None:
    body = messages_body(model, stream=True, max_tokens=10)
    with http.stream("POST", "/v1/infer/v1/messages", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        received = [(name, data) for name, data in events(response) if name != "ping"]
    names = [name for name, _ in received]
    assert all(data["type"] == name for name, data in received)
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    middle = names[1:-2]
    assert middle[0] == "content_block_start" and middle[-1] == "content_block_stop"
    assert set(middle[1:-1]) == {"content_block_delta"}
    start = received[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] > 0
    deltas = [data["delta"] for name, data in received if name == "content_block_delta"]
    assert all(d["type"] == "text_delta" and isinstance(d["text"], str) for d in deltas)
    final = received[-2][1]
    assert final["delta"]["stop_reason"] in STOP_REASONS
    assert final["usage"]["output_tokens"] <= 10
    assert_b3os(final["b3os"], streamed=True)


def test_max_tokens_ends_with_max_tokens(anthropic_client: anthropic.Anthropic, model: str) -> None:
    message = anthropic_client.messages.create(
        model=model, max_tokens=3, extra_body=GREEDY, messages=COUNTING
    )
    assert message.stop_reason == "max_tokens"
    assert message.stop_sequence is None
    assert message.usage.output_tokens == 3


def test_stop_sequence_is_reported_and_left_out_of_the_text(
    anthropic_client: anthropic.Anthropic, model: str
) -> None:
    # After "1, 2, 3, 4, 5" a comma comes within a few tokens.
    message = anthropic_client.messages.create(
        model=model, max_tokens=20, extra_body=GREEDY, messages=COUNTING, stop_sequences=[","]
    )
    assert message.stop_reason == "stop_sequence"
    assert message.stop_sequence == ","
    assert "," not in "".join(b.text for b in message.content if b.type == "text")


@pytest.mark.every_engine
def test_stop_sequence_in_a_stream(anthropic_client: anthropic.Anthropic, model: str) -> None:
    with anthropic_client.messages.stream(
        model=model, max_tokens=20, extra_body=GREEDY, messages=COUNTING, stop_sequences=[","]
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == ","
    assert "," not in streamed


@pytest.mark.every_engine
def test_trailing_assistant_turn_is_continued_not_repeated(
    anthropic_client: anthropic.Anthropic, model: str
) -> None:
    prefill = COUNTING[-1]["content"]
    message = anthropic_client.messages.create(
        model=model, max_tokens=6, extra_body=GREEDY, messages=COUNTING
    )
    text = "".join(b.text for b in message.content if b.type == "text")
    assert not text.startswith(prefill)
    counted = anthropic_client.messages.count_tokens(model=model, messages=COUNTING)
    without = anthropic_client.messages.count_tokens(model=model, messages=COUNTING[:1])
    # The prefill is in the prompt, and an open assistant turn is not closed.
    assert whole_prompt(message.usage) == counted.input_tokens > without.input_tokens


def test_multi_turn_history_and_system_prompt(
    anthropic_client: anthropic.Anthropic, model: str
) -> None:
    history = [
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
        {"role": "user", "content": [{"type": "text", "text": "How are you?"}]},
    ]
    message = anthropic_client.messages.create(
        model=model, max_tokens=4, system="Be brief.", messages=history
    )
    counted = anthropic_client.messages.count_tokens(
        model=model, system="Be brief.", messages=history
    )
    assert whole_prompt(message.usage) == counted.input_tokens


def test_system_blocks_are_joined_with_blank_lines(
    anthropic_client: anthropic.Anthropic, model: str
) -> None:
    blocks = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}]
    as_blocks = anthropic_client.messages.count_tokens(model=model, system=blocks, messages=HELLO)
    as_string = anthropic_client.messages.count_tokens(
        model=model, system="Be brief.\n\nBe kind.", messages=HELLO
    )
    assert as_blocks.input_tokens == as_string.input_tokens


@pytest.mark.every_engine
def test_count_tokens_is_the_prompt_the_message_renders(
    anthropic_client: anthropic.Anthropic, model: str
) -> None:
    counted = anthropic_client.messages.count_tokens(model=model, messages=HELLO)
    message = anthropic_client.messages.create(model=model, max_tokens=1, messages=HELLO)
    assert counted.input_tokens == whole_prompt(message.usage)


def test_count_tokens_raw_shape(http: httpx.Client, model: str) -> None:
    response = http.post(
        "/v1/infer/v1/messages/count_tokens", json={"model": model, "messages": HELLO}
    )
    assert response.status_code == 200
    assert set(response.json()) == {"input_tokens"}
    assert_ids(response)


def test_json_answer_headers_and_extension(http: httpx.Client, model: str) -> None:
    response = http.post("/v1/infer/v1/messages", json=messages_body(model))
    assert response.status_code == 200
    request_id = assert_ids(response)
    phases = server_timing(response)
    assert {"template", "ttft", "model", "total"} <= set(phases)
    body = response.json()
    assert body["id"] == "msg_" + request_id.removeprefix("req_")
    assert body["stop_sequence"] is None or body["stop_reason"] == "stop_sequence"
    assert_b3os(body["b3os"], streamed=False)


def test_stream_head_carries_ttft_and_no_total(http: httpx.Client, model: str) -> None:
    with http.stream("POST", "/v1/infer/v1/messages", json=messages_body(model, stream=True)) as r:
        assert_ids(r)
        phases = server_timing(r)
        r.read()
    assert "ttft" in phases and "total" not in phases
    assert phases["ttft"] >= phases["template"]


def test_unknown_model_is_404_in_the_anthropic_shape(
    anthropic_client: anthropic.Anthropic,
) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        anthropic_client.messages.create(model="not-served-here", max_tokens=8, messages=HELLO)
    body = raised.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert body["b3os"] == {"code": "model_not_available", "param": "model"}
    assert body["request_id"] == raised.value.response.headers["x-request-id"]


def test_invalid_request_names_the_parameter(http: httpx.Client, model: str) -> None:
    response = http.post("/v1/infer/v1/messages", json=messages_body(model, temperature=3))
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["type"] == "invalid_request_error"
    assert body["b3os"] == {"code": "invalid_request", "param": "temperature"}
    assert_ids(response)
    assert "total" in server_timing(response)


def test_body_that_is_not_json(http: httpx.Client) -> None:
    response = http.post(
        "/v1/infer/v1/messages", content=b"{", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["b3os"]["code"] == "invalid_request"
    response = http.post(
        "/v1/infer/v1/messages", content=b"x", headers={"content-type": "text/plain"}
    )
    assert response.status_code == 415
    assert response.json()["b3os"]["code"] == "unsupported_media_type"


@pytest.mark.every_engine
def test_a_repeated_prompt_is_read_from_the_cache_and_counted_as_anthropic_counts(
    http: httpx.Client, model: str
) -> None:
    """The second time a prompt comes, all of it but its last tokens is read from the prefix
    cache: `cache_read_input_tokens` says how much, `input_tokens` the rest, and the two add up
    to the prompt's count, in the body and in the stream's first and last events."""
    nonce = uuid.uuid4().hex  # a prompt no earlier test sent
    ask = [{"role": "user", "content": f"{nonce}: " + "Name a colour. " * 40}]
    counted = http.post(
        "/v1/infer/v1/messages/count_tokens", json={"model": model, "messages": ask}
    ).json()["input_tokens"]
    first = http.post("/v1/infer/v1/messages", json=messages_body(model, messages=ask)).json()
    assert whole_prompt(first["usage"]) == counted
    # At most what the template puts before the nonce (its default system prompt).
    assert first["usage"]["cache_read_input_tokens"] < counted // 4
    assert first["usage"]["cache_creation_input_tokens"] == 0
    body = messages_body(model, messages=ask, stream=True)
    with http.stream("POST", "/v1/infer/v1/messages", json=body) as response:
        received = {name: data for name, data in events(response)}
    start = received["message_start"]["message"]["usage"]
    final = received["message_delta"]["usage"]
    assert start == {**final, "output_tokens": 0}
    assert whole_prompt(final) == counted
    assert final["cache_read_input_tokens"] >= counted - 4, final  # all but the last tokens
    assert final["input_tokens"] == counted - final["cache_read_input_tokens"] >= 1
    metrics = http.get("/metrics").text
    ratio = re.search(rf'b3os_infer_prefix_cache_hit_ratio{{model="{model}"}} (\S+)', metrics)
    assert ratio is not None and 0 < float(ratio.group(1)) <= 1, metrics

"""Anthropic Messages JSON -> the canonical request."""

from __future__ import annotations

from typing import Any

import pytest

from server.canonical import Message, Text
from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.anthropic.decode import decode_count_tokens, decode_messages


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "m",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    return {**base, **overrides}


def test_minimal_request() -> None:
    request = decode_messages(body())
    assert request.model == "m"
    assert request.messages == (Message("user", (Text("Hi"),)),)
    assert request.sampling.max_tokens == 16
    assert request.stream is False


def test_system_blocks_are_joined_with_blank_lines_and_lead_the_messages() -> None:
    system = [
        {"type": "text", "text": "One."},
        {"type": "text", "text": "Two.", "cache_control": {"type": "ephemeral"}},
    ]
    request = decode_messages(body(system=system))
    assert request.messages[0] == Message("system", (Text("One.\n\nTwo."),))


def test_sampling_and_stop_sequences() -> None:
    request = decode_messages(
        body(temperature=0.5, top_p=0.9, top_k=40, stop_sequences=["###"], stream=True)
    )
    sampling = request.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.5, 0.9, 40)
    assert sampling.stop == ("###",)
    assert request.stream is True


def test_null_means_unset() -> None:
    request = decode_messages(body(temperature=None, system=None, stop_sequences=None, stream=None))
    assert request.sampling.temperature is None
    assert request.stream is False


def test_trailing_assistant_turn_is_continued() -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert decode_messages(body(messages=messages)).continues_answer


def test_metadata_and_service_tier_are_accepted_and_ignored() -> None:
    decode_messages(body(metadata={"user_id": "u"}, service_tier="auto"))


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
        ({"stop_sequences": [""]}, "stop_sequences.0"),
    ],
)
def test_invalid_requests_name_the_parameter(overrides: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        decode_messages(body(**overrides))
    assert raised.value.param == param
    assert raised.value.code == "invalid_request"


def test_unknown_parameter_is_unsupported() -> None:
    with pytest.raises(UnsupportedParameter) as raised:
        decode_messages(body(container="c1"))
    assert raised.value.param == "container"


def test_count_tokens_takes_no_max_tokens() -> None:
    request = decode_count_tokens({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})
    assert request.messages[0].text == "Hi"

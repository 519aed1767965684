"""OpenAI Chat Completions JSON -> the canonical request."""

from __future__ import annotations

from typing import Any

import pytest

from server.errors import InvalidRequest, UnsupportedParameter
from server.protocols.openai.decode import decode_chat


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    return {**base, **overrides}


def test_minimal_request_leaves_max_tokens_to_the_context() -> None:
    request, options = decode_chat(body())
    assert request.sampling.max_tokens is None
    assert options.include_usage is False


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    request, _ = decode_chat(body(max_tokens=10, max_completion_tokens=5))
    assert request.sampling.max_tokens == 5


def test_developer_messages_are_system_messages() -> None:
    request, _ = decode_chat(
        body(
            messages=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
            ]
        )
    )
    assert request.messages[0].role == "system"


def test_stop_takes_a_string_or_a_list() -> None:
    assert decode_chat(body(stop="x"))[0].sampling.stop == ("x",)
    assert decode_chat(body(stop=["x", "y"]))[0].sampling.stop == ("x", "y")


def test_top_k_minus_one_turns_it_off() -> None:
    assert decode_chat(body(top_k=-1))[0].sampling.top_k is None


def test_include_usage() -> None:
    assert decode_chat(body(stream=True, stream_options={"include_usage": True}))[1].include_usage


def test_unlisted_message_members_are_ignored() -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "annotations": [], "audio": None},
        {"role": "user", "content": "Again"},
    ]
    request, _ = decode_chat(body(messages=messages))
    assert len(request.messages) == 3


def test_accepted_and_ignored_parameters() -> None:
    decode_chat(body(metadata={"a": "b"}, store=False, service_tier="auto", user="u", n=1))


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"n": 2}, "n"),
        ({"messages": [{"role": "user", "content": None}]}, "messages.0.content"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ({"top_k": 0}, "top_k"),
    ],
)
def test_invalid_requests_name_the_parameter(overrides: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        decode_chat(body(**overrides))
    assert raised.value.param == param


def test_unknown_parameter_is_unsupported() -> None:
    with pytest.raises(UnsupportedParameter) as raised:
        decode_chat(body(prompt_logprobs=1))
    assert raised.value.param == "prompt_logprobs"

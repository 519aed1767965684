"""`--default-max-tokens`: how long an answer may run when its request names no maximum, and
`--max-output-tokens`: how long any answer may run, on a node of its own (the replay engine, whose
answers would otherwise run 256 pieces of one token: the bounds are the node's, whatever the
engine). A maximum the request names wins up to the cap, past which the answer ends as at its own
maximum; Messages requires one, so it is refused there as before."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.api.contract import MODEL
from tests.server_process import ServerProcess

DEFAULT_MAX_TOKENS = 3
MAX_OUTPUT_TOKENS = 6
HELLO = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("default-max-tokens") / "server.log",
        "--engine", "replay",
        "--default-max-tokens", str(DEFAULT_MAX_TOKENS),
        "--max-output-tokens", str(MAX_OUTPUT_TOKENS),
    )  # fmt: skip
    with process.running():
        yield process


@pytest.fixture
def client(node: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=node.base_url, api_key="x", max_retries=0)


def test_a_chat_without_max_tokens_ends_at_the_default(client: openai.OpenAI) -> None:
    done = client.chat.completions.create(model=MODEL, messages=HELLO)  # type: ignore[arg-type]
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == DEFAULT_MAX_TOKENS


def test_a_max_tokens_the_request_names_wins(client: openai.OpenAI) -> None:
    done = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,  # type: ignore[arg-type]
        max_completion_tokens=DEFAULT_MAX_TOKENS + 2,
    )
    assert done.usage is not None and done.usage.completion_tokens == DEFAULT_MAX_TOKENS + 2


def test_a_response_without_max_output_tokens_is_incomplete_at_the_default(
    client: openai.OpenAI,
) -> None:
    done = client.responses.create(model=MODEL, input="Hi")
    assert done.status == "incomplete"
    assert done.incomplete_details is not None
    assert done.incomplete_details.reason == "max_output_tokens"
    assert done.usage is not None and done.usage.output_tokens == DEFAULT_MAX_TOKENS


def test_messages_still_requires_max_tokens(node: ServerProcess) -> None:
    refused = httpx.post(
        f"{node.base_url}/v1/messages", json={"model": MODEL, "messages": HELLO}, timeout=30
    )
    assert refused.status_code == 400
    assert "max_tokens" in refused.json()["error"]["message"]


def test_the_model_card_gives_the_cap(node: ServerProcess) -> None:
    [card] = httpx.get(f"{node.base_url}/models", timeout=30).json()["data"]
    assert card["max_output_tokens"] == MAX_OUTPUT_TOKENS


def test_a_max_tokens_past_the_cap_ends_at_the_cap_on_each_api(
    node: ServerProcess, client: openai.OpenAI
) -> None:
    """What agents ask (32,000 tokens) is answered up to the cap, then ends as at its own
    maximum: `length`, `max_tokens`, `incomplete`."""
    chat = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,  # type: ignore[arg-type]
        max_completion_tokens=32_000,
    )
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage is not None and chat.usage.completion_tokens == MAX_OUTPUT_TOKENS
    body = {"model": MODEL, "max_tokens": 32_000, "messages": HELLO}
    message = httpx.post(f"{node.base_url}/v1/messages", json=body, timeout=30).json()
    assert message["stop_reason"] == "max_tokens"
    assert message["usage"]["output_tokens"] == MAX_OUTPUT_TOKENS
    response = client.responses.create(model=MODEL, input="Hi", max_output_tokens=32_000)
    assert response.status == "incomplete"
    assert response.usage is not None and response.usage.output_tokens == MAX_OUTPUT_TOKENS

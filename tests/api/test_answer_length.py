"""`--default-max-tokens`: how long an answer may run when its request names no maximum, on a
node of its own (the replay engine, whose answers would otherwise run 256 pieces of one token:
the bound is the node's, whatever the engine). A maximum the request names wins, larger or
not; Messages requires one, so it is refused there as before."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.api.contract import MODEL
from tests.server_process import ServerProcess

DEFAULT_MAX_TOKENS = 3
HELLO = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("default-max-tokens") / "server.log",
        "--engine", "replay",
        "--default-max-tokens", str(DEFAULT_MAX_TOKENS),
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

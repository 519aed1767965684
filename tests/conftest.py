"""Fixtures shared by the suite: one real server (real SGLang, real model) per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.server_process import ServerProcess


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("server") / "server.log")
    process.start()
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()
        print(f"\n--- server log tail ---\n{process.log_tail(30)}")


@pytest.fixture(scope="session")
def model(server: ServerProcess) -> str:
    with httpx.Client() as client:
        return str(client.get(f"{server.base_url}/models").json()["data"][0]["id"])


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    """Raw HTTP/1.1 against the server, at its origin."""
    with httpx.Client(base_url=server.origin, timeout=120) as client:
        yield client


@pytest.fixture
def http2(server: ServerProcess) -> Iterator[httpx.Client]:
    """Cleartext HTTP/2 with prior knowledge."""
    with httpx.Client(base_url=server.origin, timeout=120, http2=True, http1=False) as client:
        yield client


@pytest.fixture
def anthropic_client(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, auth_token="x", max_retries=0)


@pytest.fixture
def openai_client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent

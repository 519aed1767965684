"""Fixtures shared by the suite: one real server (real SGLang, real model) per engine per test
session. Every test of the server runs against each engine: `sglang` in-process, and
`sglang-remote` talking to SGLang's own HTTP server (`b3os-infer sglang-server`) on the same
model. Tests marked `front_only` reach nothing past the request decoders and run once; those
marked `remote_only` are about the remote engine."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.server_process import ServerProcess

ENGINES = tuple(os.environ.get("B3OS_TEST_ENGINES", "sglang,sglang-remote").split(","))
# Flags for the session's servers beyond the defaults (the embedded model on this machine's
# device): `python -m bench.gpu_check` runs the suite on a GPU with "--model ... --device cuda".
MODEL_ARGS = tuple(shlex.split(os.environ.get("B3OS_TEST_MODEL_ARGS", "")))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "front_only: reaches no engine, so runs against the in-process one only"
    )
    config.addinivalue_line("markers", "remote_only: about the sglang-remote engine only")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def redundant(item: pytest.Item) -> bool:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "engine" not in callspec.params:
            return False
        if callspec.params["engine"] == "sglang-remote":
            return item.get_closest_marker("front_only") is not None
        return item.get_closest_marker("remote_only") is not None

    dropped = [item for item in items if redundant(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not redundant(item)]


@pytest.fixture(scope="session", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def sglang_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """SGLang's own HTTP server on the embedded model, with the CPU compatibility pieces."""
    process = ServerProcess(
        tmp_path_factory.mktemp("sglang") / "sglang.log", *MODEL_ARGS, command="sglang-server"
    )
    try:
        with process.running("/health_generate"):
            yield process
    finally:
        print(f"\n--- SGLang server log tail ---\n{process.log_tail(30)}")


@pytest.fixture(scope="session")
def server(
    engine: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    args: tuple[str, ...] = MODEL_ARGS
    if engine == "sglang-remote":
        remote: ServerProcess = request.getfixturevalue("sglang_server")
        args += ("--engine", "sglang-remote", "--engine-url", remote.origin)
    process = ServerProcess(tmp_path_factory.mktemp("server") / "server.log", *args)
    try:
        with process.running():
            yield process
    finally:
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

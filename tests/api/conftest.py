"""Servers for the API tests beyond the session's, each started once: one with what the session's
server does not use (TLS, where ALPN chooses HTTP/2 or HTTP/1.1; the model given as a folder with
its own served name; `--system-in-messages keep`; a runtime that runs one request at a time and
lets the next wait 1 s at most, for tests/api/test_prefill.py), keeping what it answered while its
engine was still starting (tests/api/test_configured_server.py); and the agents' node, started as
docs/agents.md starts it for the agents, on the embedded model's twin (tests/families/tiny.py:
its tokenizer, template and 32,768-token window, its weights toy-sized and random). What the
agents' tests check is how the node serves each CLI's requests, which holds whatever the weights;
the twin prefills an agent's whole setup in seconds where the 135M model takes minutes on one
core (that prefill is the bench's: `python -m bench session`)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import httpx
import pytest
import trustme

from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from tests.api import readme
from tests.api.contract import MODEL
from tests.families.tiny import twin
from tests.server_process import ServerProcess, Shutdowns, StartQueue

HELLO = [{"role": "user", "content": "Say hello."}]
SERVED_NAME = "tests/smollm2-from-a-folder"
STARTING_BODY = {"model": SERVED_NAME, "max_tokens": 4, "messages": HELLO}
ONE_AT_A_TIME = ("--max-running-requests", "1", "--max-queue-wait", "1")
# The most tokens of an answer: docs/agents.md starts the agents' node on the embedded model with
# --max-output-tokens 256 (each agent asks for thousands of tokens or names none, and the 135M
# model can repeat itself to the window's end). The agents' node here takes 48: what is tested
# holds at any length (an answer ended at the cap is read by each agent as its own maximum), and
# the twin's random answers run to the cap.
AGENT_MAX_OUTPUT_TOKENS = 48


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def trust(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@dataclass
class Starting:
    """What the server answered before its engine was ready."""

    infer: httpx.Response | None = None
    ready: httpx.Response | None = None


@pytest.fixture(scope="session")
def starting() -> Starting:
    return Starting()


@pytest.fixture(scope="session")
def tls_server_start(
    starting: Starting,
    tmp_path_factory: pytest.TempPathFactory,
    ca: trustme.CA,
    trust: ssl.SSLContext,
    shutdowns: Shutdowns,
    starts: StartQueue,
) -> Iterator[Future[ServerProcess]]:
    """The configured server in the start queue; what it answers once listening, before its
    engine is ready, is kept in `starting`."""
    folder = tmp_path_factory.mktemp("tls-server")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(str(folder / "cert.pem"))
    cert.private_key_pem.write_to_path(str(folder / "key.pem"))
    model_folder = ensure_converted(default_cache_dir())
    process = ServerProcess(
        folder / "server.log",
        *("--certfile", str(folder / "cert.pem"), "--keyfile", str(folder / "key.pem")),
        *("--model", str(model_folder), "--served-model-name", SERVED_NAME),
        *("--system-in-messages", "keep"),
        *ONE_AT_A_TIME,
        scheme="https",
    )

    def ready() -> ServerProcess:
        process.wait_listening(verify=trust)
        with httpx.Client(base_url=process.origin, verify=trust, timeout=30) as client:
            starting.infer = client.post("/v1/infer/chat/completions", json=STARTING_BODY)
            starting.ready = client.get("/readyz")
        process.wait_ready(verify=trust)
        return process

    try:
        yield starts.submit([process], ready)
    finally:
        starts.stop_later([process], shutdowns)


@pytest.fixture(scope="session")
def tls_server(tls_server_start: Future[ServerProcess]) -> ServerProcess:
    return tls_server_start.result()


@pytest.fixture(scope="session")
def tls_model(tls_server: ServerProcess, trust: ssl.SSLContext) -> str:
    with httpx.Client(verify=trust, timeout=120) as client:
        [card] = client.get(f"{tls_server.base_url}/models").json()["data"]
    assert card["id"] == SERVED_NAME
    return str(card["id"])


@pytest.fixture(scope="session")
def agent_node(
    tmp_path_factory: pytest.TempPathFactory, shutdowns: Shutdowns
) -> Iterator[ServerProcess]:
    """A node as docs/agents.md starts it for the agents, on the embedded model's twin."""
    embedded = ensure_converted(default_cache_dir())
    twin_folder = twin(tmp_path_factory.mktemp("agents-model"), embedded)
    node = ServerProcess(
        tmp_path_factory.mktemp("agent-node") / "server.log",
        "--model", str(twin_folder),
        "--served-model-name", MODEL,
        "--compat", readme.node_flag("compat"),
        "--max-output-tokens", str(AGENT_MAX_OUTPUT_TOKENS),
    )  # fmt: skip
    with node.running(shutdowns=shutdowns):
        yield node


@pytest.fixture
def with_the_remote_engines_tests(engine: str) -> None:
    """A test taking this runs with the remote engine's (the `engine` parameter groups them, and
    `remote_only` chooses that one), whichever server it uses: the agents' node then stops with
    them, before the router's engines start (`engines_stop_after_their_last_test`)."""
    del engine


def served(node: ServerProcess, route: str) -> list[str]:
    """The request ids of the requests to `route` the node answered 200 (its access log)."""
    return [
        line.split()[-1]
        for line in node.log_text().splitlines()
        if f'"POST {route}' in line and " 200 " in line and "count_tokens" not in line
    ]

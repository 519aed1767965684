"""HTTP/2 and HTTP/1.1 over TLS, chosen by ALPN, on a second real server started with a
certificate (its own engine: TLS is a property of the listener). That server is also started the
way a user serves their own model: `--model FOLDER --served-model-name NAME`."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import anthropic
import httpx
import httpx2
import openai
import pytest
import trustme

from server.config import default_cache_dir
from server.models.embedded import ensure_converted
from tests.api.conventions import assert_ids
from tests.server_process import ServerProcess

HELLO = [{"role": "user", "content": "Say hello."}]
SERVED_NAME = "tests/smollm2-from-a-folder"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def trust(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA, trust: ssl.SSLContext
) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("tls-server")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(str(folder / "cert.pem"))
    cert.private_key_pem.write_to_path(str(folder / "key.pem"))
    model_folder = ensure_converted(default_cache_dir())
    process = ServerProcess(
        folder / "server.log",
        *("--certfile", str(folder / "cert.pem"), "--keyfile", str(folder / "key.pem")),
        *("--model", str(model_folder), "--served-model-name", SERVED_NAME),
        scheme="https",
    )
    process.start()
    try:
        process.wait_ready(verify=trust)
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def tls_model(tls_server: ServerProcess, trust: ssl.SSLContext) -> str:
    with httpx.Client(verify=trust, timeout=120) as client:
        [card] = client.get(f"{tls_server.base_url}/models").json()["data"]
    assert card["id"] == SERVED_NAME
    return str(card["id"])


def test_alpn_chooses_http2(
    tls_server: ServerProcess, trust: ssl.SSLContext, tls_model: str
) -> None:
    body = {"model": tls_model, "max_tokens": 4, "messages": HELLO}
    with httpx.Client(base_url=tls_server.origin, verify=trust, http2=True, timeout=120) as client:
        response = client.post("/v1/infer/chat/completions", json=body)
    assert response.http_version == "HTTP/2"
    assert response.status_code == 200
    assert_ids(response)


def test_http1_over_tls(tls_server: ServerProcess, trust: ssl.SSLContext, tls_model: str) -> None:
    body = {"model": tls_model, "max_tokens": 4, "messages": HELLO}
    with httpx.Client(base_url=tls_server.origin, verify=trust, timeout=120) as client:
        response = client.post("/v1/infer/v1/messages", json=body)
    assert response.http_version == "HTTP/1.1"
    assert response.status_code == 200


def test_sdks_stream_over_tls_with_http2(
    tls_server: ServerProcess, trust: ssl.SSLContext, tls_model: str
) -> None:
    # The Anthropic SDK 2.x runs on httpx2 (a fork of httpx), the OpenAI SDK on httpx.
    with httpx2.Client(verify=trust, http2=True, timeout=120) as transport:
        claude = anthropic.Anthropic(
            base_url=tls_server.base_url, auth_token="x", http_client=transport, max_retries=0
        )
        with claude.messages.stream(model=tls_model, max_tokens=6, messages=HELLO) as stream:
            text = "".join(stream.text_stream)
            assert stream.get_final_message().content[0].text == text
    with httpx.Client(verify=trust, http2=True, timeout=120) as transport:
        gpt = openai.OpenAI(
            base_url=tls_server.base_url, api_key="x", http_client=transport, max_retries=0
        )
        completion = gpt.chat.completions.create(
            model=tls_model, max_tokens=6, messages=HELLO, stream=True
        )
        chunks = list(completion)
    assert chunks[-1].choices[0].finish_reason in {"stop", "length"}

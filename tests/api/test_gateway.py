"""The B3IQ gateway route of chat completions (`"route": "gateway"`), through real servers: a
front node (the replay engine, serving its own model) whose gateway is the session's real
server on the embedded model, and a front whose gateway is a scripted upstream for what a real
server cannot be made to do on demand (fail, stall, cut a stream, hold one open). Asserted: where
each answer ran, its ids, timing and usage as the contract has them, what reaches the upstream
(the node's credential, never the client's), metering to the client's organization, and each
failure in its documented shape."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from tests.api.conventions import server_timing, wait_for
from tests.api.sse import events
from tests.api.test_tools import MAX_TOKENS, OPENAI_TOOLS, SCHEMAS
from tests.scripted_upstream import USAGE, ScriptedUpstream
from tests.server_process import ServerProcess, free_port

CHAT = "/v1/infer/chat/completions"
LOCAL = "front-model"  # what the front nodes serve themselves (the replay engine)
GATEWAY_KEY = "gw-secret-key"
HELLO = [{"role": "user", "content": "Say hello."}]


def front(folder: Path, gateway_url: str, *args: str) -> ServerProcess:
    return ServerProcess(
        folder / "front.log",
        "--engine", "replay",
        "--served-model-name", LOCAL,
        "--gateway-url", gateway_url,
        "--gateway-api-key", GATEWAY_KEY,
        *args,
    )  # fmt: skip


@pytest.fixture(scope="module")
def real_front(
    server: ServerProcess, model: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """Its gateway: the session's server, on the embedded model, listed."""
    folder = tmp_path_factory.mktemp("gateway-real")
    with front(folder, server.base_url, "--gateway-models", model).running() as process:
        yield process


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as scripted:
        yield scripted


@pytest.fixture(scope="module")
def keyed_front(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, str, Path]]:
    """Its gateway: the scripted upstream; a key store, and a 1 s gateway timeout."""
    folder = tmp_path_factory.mktemp("gateway-scripted")
    db = folder / "node.db"
    command = ["keys", "create", "--db", str(db), "--org", "acme", "--project", "p1"]
    created = subprocess.run(
        [sys.executable, "-m", "server", *command, "--scopes", "infer:run,infer:read"],
        capture_output=True,
        text=True,
        check=True,
    )
    key = created.stdout.strip()
    process = front(folder, upstream.url, "--db", str(db), "--gateway-timeout", "1")
    with process.running():
        yield process, key, db


def via(real_front: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=real_front.base_url, api_key="client-key", max_retries=0)


GATEWAY: Any = {"route": "gateway"}


def test_a_model_served_here_stays_local(real_front: ServerProcess) -> None:
    body = {"model": LOCAL, "route": "gateway", "max_tokens": 4, "messages": HELLO}
    answer = httpx.post(f"{real_front.origin}{CHAT}", json=body, timeout=60)
    assert answer.status_code == 200
    assert answer.json()["b3os"]["route"] == "local"
    assert "gateway" not in server_timing(answer)


def test_an_unknown_model_is_answered_by_the_gateway(real_front: ServerProcess, model: str) -> None:
    with httpx.Client(base_url=real_front.origin, timeout=120) as http:
        body = {"model": model, "route": "gateway", "max_tokens": 8, "messages": HELLO}
        answer = http.post(CHAT, json=body)
        assert answer.status_code == 200, answer.text
        request_id = answer.headers["x-request-id"]
        data = answer.json()
        assert data["id"] == "chatcmpl-" + request_id.removeprefix("req_")
        assert data["model"] == model
        assert data["b3os"]["route"] == "gateway"
        assert {"gateway", "ttft", "model", "total"} <= set(server_timing(answer))
        usage = data["usage"]
        assert 0 < usage["completion_tokens"] <= 8 and usage["prompt_tokens"] > 0
        entry = http.get(f"/v1/requests/{request_id}").json()
        assert entry["served_by"] == "gateway" and entry["status"] == "succeeded"
        assert entry["usage"]["prompt_tokens"] == usage["prompt_tokens"]  # the upstream's count
        assert entry["usage"]["completion_tokens"] == usage["completion_tokens"]


def test_a_gateway_stream_through_the_sdk(real_front: ServerProcess, model: str) -> None:
    """Streamed through without buffering; usage only where the client asked for it, though the
    node always asks the upstream."""
    client = via(real_front)
    for include in (False, True):
        chunks = list(
            client.chat.completions.create(
                model=model,
                messages=HELLO,  # type: ignore[arg-type]
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True} if include else None,
                extra_body=GATEWAY,
            )
        )
        assert len({chunk.id for chunk in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
        with_usage = [chunk for chunk in chunks if chunk.usage is not None]
        assert len(with_usage) == (1 if include else 0)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert finishes[-1] in ("stop", "length")


def test_tools_and_json_answers_keep_their_constraints(
    real_front: ServerProcess, model: str
) -> None:
    client = via(real_front)
    called = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=OPENAI_TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=MAX_TOKENS,
        temperature=0,
        extra_body=GATEWAY,
    )
    [choice] = called.choices
    [call] = choice.message.tool_calls or []
    assert call.id.startswith("call_") and call.type == "function"
    if choice.finish_reason == "tool_calls":  # else max_tokens cut its arguments
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    answered = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Is water wet?"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": schema, "strict": True},
        },
        max_tokens=40,
        temperature=0,
        extra_body=GATEWAY,
    )
    assert answered.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(answered.choices[0].message.content or ""), schema)


def test_models_lists_the_gateway_models(real_front: ServerProcess, model: str) -> None:
    listed = httpx.get(f"{real_front.base_url}/models").json()["data"]
    assert [(m["id"], m["route"]) for m in listed] == [(LOCAL, "local"), (model, "gateway")]


def test_a_model_the_gateway_is_not_set_up_for_is_404(real_front: ServerProcess) -> None:
    body = {"model": "other-model", "route": "gateway", "max_tokens": 4, "messages": HELLO}
    answer = httpx.post(f"{real_front.origin}{CHAT}", json=body, timeout=60)
    assert answer.status_code == 404
    assert answer.json()["error"] == {
        "message": "other-model is not served on this node nor through its gateway; GET "
        "/v1/infer/models lists the models that are",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_available",
    }


def test_the_request_is_judged_by_the_contract_before_it_leaves(
    keyed_front: tuple[ServerProcess, str, Path], upstream: ScriptedUpstream
) -> None:
    process, key, _ = keyed_front
    sent = len(upstream.requests)
    body = {"model": "ok", "route": "gateway", "max_tokens": 0, "messages": HELLO}
    answer = httpx.post(f"{process.origin}{CHAT}", json=body, headers={"x-api-key": key})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "max_tokens"
    assert len(upstream.requests) == sent  # nothing reached the gateway


def test_the_upstream_gets_the_nodes_key_and_its_usage_is_metered(
    keyed_front: tuple[ServerProcess, str, Path], upstream: ScriptedUpstream
) -> None:
    process, key, db = keyed_front
    body = {"model": "ok", "route": "gateway", "max_tokens": 16, "messages": HELLO, "user": "u1"}
    answer = httpx.post(f"{process.origin}{CHAT}", json=body, headers={"x-api-key": key})
    assert answer.status_code == 200, answer.text
    request_id = answer.headers["x-request-id"]
    data = answer.json()
    assert data["choices"][0]["message"]["content"] == "Hi!"
    assert data["usage"]["prompt_tokens"] == USAGE["prompt_tokens"]
    assert data["usage"]["completion_tokens"] == USAGE["completion_tokens"]
    assert data["id"] != "upstream-id"
    received = upstream.requests[-1]
    headers = {name.lower(): value for name, value in received["headers"].items()}
    assert headers["authorization"] == f"Bearer {GATEWAY_KEY}"
    assert key not in json.dumps(received)  # the client's key never leaves the node
    assert received["body"]["stream"] is True
    assert received["body"]["stream_options"] == {"include_usage": True}
    assert received["body"]["max_completion_tokens"] == 16 and "route" not in received["body"]
    with sqlite3.connect(db) as store:
        row = store.execute(
            "SELECT org, input_tokens, output_tokens, status FROM usage WHERE request_id = ?",
            (request_id,),
        ).fetchone()
    assert row == ("acme", USAGE["prompt_tokens"], USAGE["completion_tokens"], "succeeded")
    assert GATEWAY_KEY not in process.log_text()


FAILURES = {
    # model: (status, code, Retry-After, message)
    "fail-500": (503, "infer_backend_unavailable", "5",
                 "the gateway answered 500: upstream exploded; retry in 5 seconds"),
    "fail-429": (503, "capacity_unavailable", "7",
                 "the gateway is at capacity: too many; retry in 7 seconds"),
    "fail-400": (400, "invalid_request", None, "the gateway: messages.0: bad thing"),
    "slow": (503, "infer_backend_unavailable", "5",
             "the gateway did not answer in time; retry in 5 seconds"),
    "cut": (503, "infer_backend_unavailable", "5",
            "the gateway's answer ended before it finished; retry in 5 seconds"),
}  # fmt: skip


@pytest.mark.parametrize("failure", list(FAILURES))
def test_upstream_failures_before_the_first_byte(
    keyed_front: tuple[ServerProcess, str, Path], failure: str
) -> None:
    process, key, _ = keyed_front
    status, code, retry_after, message = FAILURES[failure]
    body = {"model": failure, "route": "gateway", "max_tokens": 4, "messages": HELLO}
    answer = httpx.post(
        f"{process.origin}{CHAT}", json=body, headers={"x-api-key": key}, timeout=30
    )
    assert answer.status_code == status, answer.text
    assert answer.headers.get("retry-after") == retry_after
    error = answer.json()["error"]
    assert (error["code"], error["message"]) == (code, message)
    if failure == "fail-400":
        assert error["param"] == "messages.0"  # the upstream's, kept


def test_a_stream_cut_midway_ends_with_the_error_chunk(
    keyed_front: tuple[ServerProcess, str, Path],
) -> None:
    process, key, _ = keyed_front
    body = {"model": "cut", "route": "gateway", "stream": True, "messages": HELLO}
    with httpx.stream(
        "POST", f"{process.origin}{CHAT}", json=body, headers={"x-api-key": key}
    ) as answer:
        assert answer.status_code == 200
        received = [data for _, data in events(answer)]
    assert received[0]["choices"][0]["delta"]["content"] == "Hi"
    assert received[-1]["error"]["code"] == "infer_backend_unavailable"


def test_a_client_gone_closes_the_upstream_request(
    keyed_front: tuple[ServerProcess, str, Path], upstream: ScriptedUpstream
) -> None:
    process, key, _ = keyed_front
    body = {"model": "hold", "route": "gateway", "stream": True, "messages": HELLO}
    with httpx.stream(
        "POST", f"{process.origin}{CHAT}", json=body, headers={"x-api-key": key}
    ) as answer:
        first = next(answer.iter_lines())
        assert first.startswith("data: ")
    wait_for(upstream.gone.is_set, timeout=10)


def test_an_unreachable_gateway_is_503(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    with front(tmp_path, closed).running() as process:
        body = {"model": "any", "route": "gateway", "max_tokens": 4, "messages": HELLO}
        answer = httpx.post(f"{process.origin}{CHAT}", json=body, timeout=30)
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "5"
    assert answer.json()["error"] == {
        "message": "the gateway cannot be reached; retry in 5 seconds",
        "type": "server_error",
        "param": None,
        "code": "infer_backend_unavailable",
    }


def test_messages_has_no_gateway_route(real_front: ServerProcess, model: str) -> None:
    body = {"model": "elsewhere", "max_tokens": 4, "messages": HELLO}
    answer = httpx.post(f"{real_front.base_url}/v1/messages", json=body, timeout=30)
    assert answer.status_code == 404
    assert answer.json()["b3os"]["code"] == "model_not_available"

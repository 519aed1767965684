"""Running as a node, through a real server with a key store and a limits file, on the real
model (SGLang's own HTTP server through the sglang-remote engine, which the session shares):
keys and scopes, limits with their headers, metering that adds up (abandoned streams and a
killed server included), the request log, and the Prometheus metrics."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.contract import MODEL, TOO_LONG_FOR_THE_WINDOW, whole_prompt
from tests.api.conventions import COUNTING, wait_for
from tests.api.sse import events
from tests.server_process import ServerProcess

pytestmark = pytest.mark.remote_only  # runs with the remote variant: its SGLang server is up

HELLO = [{"role": "user", "content": "Say hello."}]
LIMITS = """
[default]
requests_per_minute = 1000

[orgs.rpm]
requests_per_minute = 3

[orgs.tpm]
tokens_per_minute = 1000

[orgs.tpm-again]
tokens_per_minute = 1000

[orgs.tpm-third]
tokens_per_minute = 1000

[orgs.busy]
requests_in_flight = 4
"""
BUSY_IN_FLIGHT = 4
CHECKSUM_MESSAGE = "API key checksum does not match; check that the whole key was copied"


def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server", *args, "--db", str(db)],
        capture_output=True,
        text=True,
        check=True,
    )


def create_key(db: Path, org: str, scopes: str = "infer:run,infer:read", *extra: str) -> str:
    created = cli(db, "keys", "create", "--org", org, "--project", "p1", "--scopes", scopes, *extra)
    key = created.stdout.strip()
    assert key.startswith("b3os_sk_")
    assert "shown once" in created.stderr
    return key


@dataclass
class Node:
    process: ServerProcess
    db: Path
    keys: dict[str, str]

    def client(self, key: str | None) -> httpx.Client:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        return httpx.Client(base_url=self.process.origin, headers=headers, timeout=120)

    def usage(self) -> dict[str, dict[str, Any]]:
        """The metering records, read from the store as another process would."""
        with sqlite3.connect(self.db) as db:
            db.row_factory = sqlite3.Row
            return {row["request_id"]: dict(row) for row in db.execute("SELECT * FROM usage")}


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, sglang_server: ServerProcess, engine: str
) -> Iterator[Node]:
    del engine  # with the remote variant of the suite
    folder = tmp_path_factory.mktemp("node")
    db, limits = folder / "node.db", folder / "limits.toml"
    limits.write_text(LIMITS)
    keys = {
        "acme": create_key(db, "acme"),
        "acme-read": create_key(db, "acme", "infer:read"),
        "acme-run": create_key(db, "acme", "infer:run"),
        "other": create_key(db, "other"),
        "rpm": create_key(db, "rpm"),
        "tpm": create_key(db, "tpm"),
        "tpm-again": create_key(db, "tpm-again"),
        "tpm-third": create_key(db, "tpm-third"),
        "busy": create_key(db, "busy"),
        "capped": create_key(db, "capped", "infer:run", "--spend-cap-tokens", "60"),
        "crash": create_key(db, "crash"),
    }
    args = ["--engine", "sglang-remote", "--engine-url", sglang_server.origin]
    process = ServerProcess(folder / "node.log", *args, "--db", str(db), "--limits", str(limits))
    with process.running():
        yield Node(process, db, keys)


def chat_body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 4, "messages": HELLO, **extra}


def messages_body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 4, "messages": HELLO, **extra}


ROUTES = [("/v1/infer/chat/completions", chat_body), ("/v1/infer/v1/messages", messages_body)]


# --- keys and scopes -------------------------------------------------------------------------


def assert_openai_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    return dict(error)


@pytest.mark.parametrize(("path", "body"), ROUTES)
def test_a_missing_or_broken_key_is_401_in_the_openai_shape(
    node: Node, path: str, body: Any
) -> None:
    with node.client(None) as client:
        error = assert_openai_error(client.post(path, json=body()), 401, "unauthorized")
        assert error["type"] == "authentication_error"
    key = node.keys["acme"]
    broken = key[:-1] + ("0" if key[-1] != "0" else "1")
    with node.client(broken) as client:
        response = client.post(path, json=body())
    error = assert_openai_error(response, 401, "unauthorized")
    assert error["message"] == CHECKSUM_MESSAGE
    assert response.headers["www-authenticate"].startswith("Bearer")
    with node.client(key[:20]) as client:
        assert_openai_error(client.post(path, json=body()), 401, "unauthorized")


@pytest.mark.parametrize(("path", "body"), ROUTES)
def test_a_key_without_the_scope_is_403_in_the_openai_shape(
    node: Node, path: str, body: Any
) -> None:
    with node.client(node.keys["acme-read"]) as client:
        error = assert_openai_error(client.post(path, json=body()), 403, "forbidden")
    assert "infer:run" in error["message"]
    assert error["type"] == "permission_error"
    with node.client(node.keys["acme-run"]) as client:
        assert_openai_error(client.get("/v1/infer/models"), 403, "forbidden")
    with node.client(node.keys["acme-read"]) as client:
        assert client.get("/v1/infer/models").status_code == 200


def test_both_sdks_authenticate_with_a_key(node: Node) -> None:
    key = node.keys["acme"]
    base = f"{node.process.origin}/v1/infer"
    chat = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
    assert chat.chat.completions.create(model=MODEL, max_tokens=2, messages=HELLO).usage
    messages = anthropic.Anthropic(base_url=base, auth_token=key, max_retries=0)
    assert messages.messages.create(model=MODEL, max_tokens=2, messages=HELLO).usage
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=base, auth_token="b3os_sk_x", max_retries=0).messages.create(
            model=MODEL, max_tokens=2, messages=HELLO
        )


def test_a_revoked_key_stops_working(node: Node) -> None:
    key = create_key(node.db, "acme")
    with node.client(key) as client:
        assert client.post("/v1/infer/chat/completions", json=chat_body()).status_code == 200
        key_id = "key_" + key[len("b3os_sk_") :][:8]
        cli(node.db, "keys", "revoke", key_id)
        error = assert_openai_error(
            client.post("/v1/infer/chat/completions", json=chat_body()), 401, "unauthorized"
        )
    assert "revoked" in error["message"]
    listed = cli(node.db, "keys", "list").stdout
    assert key_id in listed
    assert key not in listed  # the secret is never stored


# --- limits ----------------------------------------------------------------------------------


def rate_headers(response: httpx.Response) -> tuple[int, int, int]:
    h = response.headers
    return int(h["ratelimit-limit"]), int(h["ratelimit-remaining"]), int(h["ratelimit-reset"])


def until_refused(client: httpx.Client, body: dict[str, Any], most: int) -> list[httpx.Response]:
    """Requests until one is refused, those of the refusal's window only: the windows are fixed
    minutes of the clock, so one may turn between two requests (its remaining count goes up)."""
    answers: list[httpx.Response] = []
    for _ in range(3 * most):
        answer = client.post("/v1/infer/chat/completions", json=body)
        if answer.status_code != 200:
            return [*answers, answer]
        if answers and rate_headers(answer)[1] >= rate_headers(answers[-1])[1]:
            answers = []  # the minute turned: count in the new window
        answers.append(answer)
        assert len(answers) <= most, "never refused"
    raise AssertionError("never refused")


def test_requests_per_minute_with_the_standard_headers(node: Node) -> None:
    with node.client(node.keys["rpm"]) as client:
        answers = until_refused(client, chat_body(max_tokens=1), most=4)
    *served, refused = answers
    assert [r.status_code for r in served] == [200] * len(served)
    assert [rate_headers(r)[:2] for r in served][-1] == (3, 3 - len(served))
    error = assert_openai_error(refused, 429, "rate_limited")
    limit, remaining, reset = rate_headers(refused)
    assert (limit, remaining) == (3, 0)
    assert 1 <= reset <= 60
    assert int(refused.headers["retry-after"]) == reset
    assert error["message"].startswith(f"3 requests per minute allowed on {MODEL}")


def test_tokens_per_minute_are_settled_with_the_real_counts(node: Node) -> None:
    # A one-word enum answer: the grammar ends it after a few tokens, whatever max_tokens says.
    answer_format = {
        "type": "json_schema",
        "json_schema": {"name": "a", "schema": {"type": "string", "enum": ["yes"]}},
    }
    short = chat_body(max_tokens=900, response_format=answer_format)
    # All three within one rate window; where the minute turns, again with an organization whose
    # windows are all empty (what came after the turn counts in the new window).
    for org in ("tpm", "tpm-again", "tpm-third"):
        with node.client(node.keys[org]) as client:
            first = client.post("/v1/infer/chat/completions", json=short)
            assert first.status_code == 200, first.text
            used = first.json()["usage"]["total_tokens"]
            assert used < 100
            # Charged its prompt + 900 while running, then settled to `used`: another one fits.
            second = client.post("/v1/infer/chat/completions", json=short)
            assert second.status_code == 200, second.text
            # Exactly a minute's worth (its prompt and max_tokens make 1,000): refused for now.
            room = 1000 - first.json()["usage"]["prompt_tokens"]
            full = chat_body(max_tokens=room, response_format=answer_format)
            refused = client.post("/v1/infer/chat/completions", json=full)
        if rate_headers(refused)[2] <= rate_headers(first)[2]:
            break
    error = assert_openai_error(refused, 429, "rate_limited")
    assert error["message"].startswith(f"1000 tokens per minute allowed on {MODEL}")
    limit, remaining, _ = rate_headers(refused)
    assert limit == 1000
    assert remaining == 1000 - used - second.json()["usage"]["total_tokens"]


def test_what_no_minute_could_admit_is_a_400_never_a_429(node: Node) -> None:
    """max_tokens is clamped to the window before admission; a request whose prompt and clamped
    max_tokens exceed a whole minute's tokens could never be admitted: 400, no Retry-After."""
    with node.client(node.keys["tpm"]) as client:
        for max_tokens in (18446744073709551616, 4000):
            refused = client.post(
                "/v1/infer/chat/completions", json=chat_body(max_tokens=max_tokens)
            )
            error = assert_openai_error(refused, 400, "invalid_request")
            assert error["param"] == "max_tokens"
            assert "more than the 1000 tokens per minute allowed" in error["message"]
            assert "retry-after" not in refused.headers
            refused = client.post(
                "/v1/infer/v1/messages",
                json={"model": MODEL, "max_tokens": max_tokens, "messages": HELLO},
            )
            assert refused.status_code == 400, refused.text
            assert refused.json()["b3os"]["code"] == "invalid_request"
            assert "retry-after" not in refused.headers


def test_concurrency_is_held_under_50_simultaneous_requests(node: Node) -> None:
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def one(_: int) -> tuple[int, str | None, str | None]:
        with node.client(node.keys["busy"]) as client:
            body = chat_body(max_tokens=8, stream=True)
            with client.stream("POST", "/v1/infer/chat/completions", json=body) as response:
                started = time.monotonic()
                response.read()
                if response.status_code == 200:
                    with lock:
                        spans.append((started, time.monotonic()))
                    return 200, None, None
                error = json.loads(response.content)["error"]["code"]
                return response.status_code, error, response.headers.get("retry-after")

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(one, range(50)))
    statuses = {status for status, _, _ in results}
    assert statuses <= {200, 429}, results
    refused = [r for r in results if r[0] == 429]
    assert refused, "50 at once against 4 in flight: some must be refused"
    assert all(code == "concurrency_limited" and retry == "1" for _, code, retry in refused)
    assert len(spans) >= BUSY_IN_FLIGHT
    # Never more than 4 answers open at once, as the client saw them.
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    open_now = peak = 0
    for _, step in edges:
        open_now += step
        peak = max(peak, open_now)
    assert peak <= BUSY_IN_FLIGHT


def test_concurrency_limit_hit_and_recovered(node: Node) -> None:
    body = {**chat_body(max_tokens=2000, temperature=0, stream=True), "messages": COUNTING}
    with node.client(node.keys["busy"]) as client:
        streams = [client.stream("POST", "/v1/infer/chat/completions", json=body) for _ in range(4)]
        opened = [stream.__enter__() for stream in streams]
        try:
            assert [r.status_code for r in opened] == [200] * 4
            refused = client.post("/v1/infer/chat/completions", json=chat_body())
            error = assert_openai_error(refused, 429, "concurrency_limited")
            assert refused.headers["retry-after"] == "1"
            assert rate_headers(refused)[:2] == (4, 0)
            assert "4 requests in flight allowed for busy" in error["message"]
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)

        def admitted() -> bool:
            return client.post("/v1/infer/chat/completions", json=chat_body()).status_code == 200

        wait_for(admitted)


def test_a_spend_cap_refuses_further_requests(node: Node) -> None:
    with node.client(node.keys["capped"]) as client:
        counting = chat_body(max_tokens=40, temperature=0, messages=COUNTING)
        first = client.post("/v1/infer/chat/completions", json=counting)
        assert first.status_code == 200
        assert first.json()["usage"]["total_tokens"] >= 60  # past the cap of 60 tokens
        refused = client.post("/v1/infer/chat/completions", json=chat_body())
    error = assert_openai_error(refused, 429, "quota_exceeded")
    assert "spend cap of 60 tokens" in error["message"]


# --- metering --------------------------------------------------------------------------------


def test_metering_equals_the_usage_clients_were_given(node: Node) -> None:
    key = node.keys["acme"]
    given: dict[str, tuple[int, int]] = {}
    with node.client(key) as client:
        response = client.post("/v1/infer/chat/completions", json=chat_body())
        usage = response.json()["usage"]
        given[response.headers["x-request-id"]] = (
            usage["prompt_tokens"],
            usage["completion_tokens"],
        )
        response = client.post("/v1/infer/v1/messages", json=messages_body())
        usage = response.json()["usage"]
        given[response.headers["x-request-id"]] = (whole_prompt(usage), usage["output_tokens"])
        body = chat_body(stream=True, stream_options={"include_usage": True})
        with client.stream("POST", "/v1/infer/chat/completions", json=body) as stream:
            chunks = [data for _, data in events(stream) if data != "[DONE]"]
        usage = chunks[-1]["usage"]
        given[stream.headers["x-request-id"]] = (usage["prompt_tokens"], usage["completion_tokens"])
        # An abandoned stream: billed to its last generated token, as the request log says.
        long = {**chat_body(max_tokens=2000, temperature=0, stream=True), "messages": COUNTING}
        with client.stream("POST", "/v1/infer/chat/completions", json=long) as stream:
            abandoned = stream.headers["x-request-id"]
            deltas = 0
            for _, data in events(stream):
                deltas += bool(data["choices"] and data["choices"][0]["delta"].get("content"))
                if deltas == 5:
                    break

        def logged() -> dict[str, Any] | None:
            entry = client.get(f"/v1/requests/{abandoned}").json()
            return entry if entry["status"] == "canceled" else None

        entry = logged() or wait_for(logged)
    given[abandoned] = (entry["usage"]["prompt_tokens"], entry["usage"]["completion_tokens"])
    assert 5 <= given[abandoned][1] < 2000

    def metered() -> dict[str, dict[str, Any]] | None:
        records = node.usage()
        ours = {rid: records.get(rid) for rid in given}
        if all(r is not None and r["status"] != "running" for r in ours.values()):
            return records
        return None

    records = wait_for(metered)
    for request_id, (input_tokens, output_tokens) in given.items():
        record = records[request_id]
        assert (record["input_tokens"], record["output_tokens"]) == (input_tokens, output_tokens)
        assert (record["org"], record["project"]) == ("acme", "p1")
        assert record["key_id"] == "key_" + key[len("b3os_sk_") :][:8]
    assert records[abandoned]["status"] == "canceled"
    # The usage command adds the same records up.
    totals = [json.loads(line) for line in cli(node.db, "usage", "--json").stdout.splitlines()]
    acme = [t for t in totals if t["key_id"] == records[abandoned]["key_id"]]
    assert sum(t["input_tokens"] for t in acme) == sum(
        r["input_tokens"] for r in records.values() if r["key_id"] == acme[0]["key_id"]
    )


def test_metering_survives_the_server_killed_mid_stream(node: Node) -> None:
    long = {**chat_body(max_tokens=2000, temperature=0, stream=True), "messages": COUNTING}
    with node.client(node.keys["crash"]) as client:
        with client.stream("POST", "/v1/infer/chat/completions", json=long) as stream:
            request_id = stream.headers["x-request-id"]
            # Read by hand, the reader kept: leaving a loop over it would close the connection.
            reader = events(stream)
            received = 0
            while received < 5:
                _, data = next(reader)
                received += bool(data["choices"] and data["choices"][0]["delta"].get("content"))
            node.process.kill()  # at once: the record is written ahead of what the client gets
    record = node.usage()[request_id]
    assert record["status"] == "running"  # it never ended
    assert received <= record["output_tokens"] < 2000
    node.process.start()
    node.process.wait_ready()
    after = node.usage()[request_id]
    assert after["status"] == "interrupted"
    assert after["output_tokens"] == record["output_tokens"]
    assert after["input_tokens"] == record["input_tokens"] > 0
    with node.client(node.keys["crash"]) as client:
        entry = client.get(f"/v1/requests/{request_id}").json()  # kept in the store
        assert entry["status"] == "interrupted"
        assert client.post("/v1/infer/chat/completions", json=chat_body()).status_code == 200


# --- the request log and the metrics -----------------------------------------------------------


def test_request_log_entries_for_success_and_failure(node: Node) -> None:
    with node.client(node.keys["acme"]) as client:
        ok = client.post("/v1/infer/v1/messages", json=messages_body())
        too_long = chat_body(messages=TOO_LONG_FOR_THE_WINDOW)
        failed = client.post("/v1/infer/chat/completions", json=too_long)
        assert failed.status_code == 400
        entry = client.get(f"/v1/requests/{ok.headers['x-request-id']}").json()
        failure = client.get(f"/v1/requests/{failed.headers['x-request-id']}").json()
    assert entry["route"] == "messages"
    assert entry["model"] == MODEL
    assert entry["status"] == "succeeded"
    assert entry["error"] is None
    assert entry["usage"]["completion_tokens"] == ok.json()["usage"]["output_tokens"]
    assert {"template", "ttft", "model"} <= set(entry["timing"])
    assert entry["duration_ms"] >= entry["timing"]["ttft"] > 0
    assert failure["status"] == "failed"
    assert failure["error"] == {"code": "context_length_exceeded"}
    assert failure["route"] == "chat.completions"
    assert failure["duration_ms"] > 0
    # Another organization's key is told there is no such request.
    with node.client(node.keys["other"]) as client:
        assert_openai_error(
            client.get(f"/v1/requests/{ok.headers['x-request-id']}"), 404, "not_found"
        )


def test_metrics_parse_and_count(node: Node) -> None:
    with node.client(node.keys["acme"]) as client:
        client.post("/v1/infer/chat/completions", json=chat_body(max_tokens=6))
        with node.client(None) as anonymous:
            anonymous.post("/v1/infer/chat/completions", json=chat_body())
            text = anonymous.get("/metrics").text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name in (
        "b3os_infer_requests",
        "b3os_infer_time_to_first_token_seconds",
        "b3os_infer_inter_token_latency_seconds",
        "b3os_infer_e2e_seconds",
        "b3os_infer_queue_seconds",
        "b3os_infer_grammar_seconds",
        "b3os_infer_prompt_tokens",
        "b3os_infer_completion_tokens",
        "b3os_infer_prefix_cached_tokens",
        "b3os_infer_requests_in_flight",
        "b3os_infer_engine_queue_depth",
    ):
        assert name in families, name

    def total(name: str, suffix: str, **labels: str) -> float:
        return sum(
            s.value
            for s in families[name].samples
            if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items())
        )

    route = "/v1/infer/chat/completions"
    assert total("b3os_infer_requests", "_total", route=route, status="200", code="") >= 1
    assert total("b3os_infer_requests", "_total", route=route, code="unauthorized") >= 1
    assert total("b3os_infer_time_to_first_token_seconds", "_count", api="chat.completions") >= 1
    assert total("b3os_infer_inter_token_latency_seconds", "_count") >= 5
    assert total("b3os_infer_completion_tokens", "_total", model=MODEL) >= 6
    assert total("b3os_infer_engine_queue_depth", "") >= 0


# --- the Responses API's kept responses ----------------------------------------------------------


def test_kept_responses_belong_to_their_organization_and_survive_a_restart(node: Node) -> None:
    """Kept in --db: a chain of previous_response_id goes on after the node restarts; another
    organization is told none of it exists, whatever it asks."""

    def sdk(key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{node.process.origin}/v1/infer", api_key=key)

    acme, other = sdk(node.keys["acme"]), sdk(node.keys["other"])
    small: dict[str, Any] = {"model": MODEL, "max_output_tokens": 4, "temperature": 0}
    first = acme.responses.create(input="My name is Ada.", **small)
    second = acme.responses.create(input="What is my name?", previous_response_id=first.id, **small)
    # A kept response of another organization is no response there: 404 for its routes, and
    # OpenAI's 400 previous_response_not_found for a request that continues it.
    for attempt, refusal in (
        (lambda: other.responses.retrieve(second.id), openai.NotFoundError),
        (lambda: other.responses.delete(second.id), openai.NotFoundError),
        (lambda: other.responses.input_items.list(second.id), openai.NotFoundError),
        (
            lambda: other.responses.create(input="Hi", previous_response_id=second.id, **small),
            openai.BadRequestError,
        ),
        (
            lambda: other.responses.input_tokens.count(
                model=MODEL, input="Hi", previous_response_id=second.id
            ),
            openai.BadRequestError,
        ),
    ):
        with pytest.raises(refusal) as raised:
            attempt()
        assert "My name is Ada" not in str(raised.value.body)  # never the body
    node.process.kill()
    node.process.start()
    node.process.wait_ready()
    assert acme.responses.retrieve(second.id).output == second.output
    third = acme.responses.create(input="Say it again.", previous_response_id=second.id, **small)
    assert third.usage is not None and second.usage is not None
    assert third.usage.input_tokens > second.usage.input_tokens  # the whole chain, kept
    listed = acme.responses.input_items.list(third.id, order="asc")
    assert [item.content[0].text for item in listed.data if item.type == "message"][:1] == [
        "My name is Ada."
    ]
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(third.id)

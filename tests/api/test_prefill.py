"""Agent-sized prompts: a prompt whose client leaves mid-prefill stops costing the runtime, and
the queue bound counts a request's wait, never the prefill of one the runtime has started. (How
fast, and how little the others wait meanwhile, is the bench's: `python -m bench prefill
interference`.)"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Any

import httpx
import orjson
import pytest

from server.engines.sglang.cpu.chunking import MIN_CHUNK
from tests.api.conventions import COUNTING, metric, wait_for
from tests.server_process import ServerProcess

LONG_PROMPT_NOTES = 450  # about 4,400 tokens: tens of seconds of prefill on these CPUs
# About 1,200 tokens: seconds of prefill here, several times the 1 s queue bound.
PATIENT_PROMPT_NOTES = 130
# Chunks the long answer streams on after the waiting request is refused: it was not disturbed.
STREAMED_ON = 10


def long_prompt(tag: str, notes_count: int = LONG_PROMPT_NOTES) -> str:
    notes = " ".join(f"note {i} of {tag} is filed;" for i in range(notes_count))
    return f"Read these notes, then answer in one word. {notes}"


def sglang_metric(sglang: ServerProcess, name: str, **labels: str) -> float:
    """A sample of SGLang's own Prometheus metrics (its server runs with --enable-metrics)."""
    return metric(httpx.get(f"{sglang.origin}/metrics", timeout=30).text, name, **labels)


def prefilled(sglang: ServerProcess) -> float:
    """Prompt tokens SGLang's scheduler has computed so far (cache hits not counted)."""
    return sglang_metric(sglang, "sglang:realtime_tokens_total", mode="prefill_compute")


@pytest.mark.remote_only
def test_a_client_that_leaves_mid_prefill_stops_its_prefill(
    server: ServerProcess, sglang_server: ServerProcess, model: str
) -> None:
    """Through the node to SGLang's own server, whose metrics count the prompt tokens its
    scheduler computes: once the client has gone, the prompt's prefill stops after the chunk
    in flight, far short of the prompt."""
    before = prefilled(sglang_server)
    body = {
        "model": model,
        "max_tokens": 1,
        "stream": True,
        "messages": [{"role": "user", "content": long_prompt(f"leaver {before}")}],
    }
    with httpx.Client(base_url=server.origin, timeout=120) as http:
        prompt_tokens = http.post(
            "/v1/infer/v1/messages/count_tokens", json={k: body[k] for k in ("model", "messages")}
        ).json()["input_tokens"]
    payload = orjson.dumps(body)
    head = (
        "POST /v1/infer/chat/completions HTTP/1.1\r\nHost: test\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    # A raw connection, closed mid-prefill: the response's head waits for the first token.
    with socket.create_connection(("127.0.0.1", server.port)) as connection:
        connection.sendall(head.encode() + payload)
        wait_for(lambda: prefilled(sglang_server) > before, timeout=120)
    with httpx.Client(base_url=server.origin, timeout=120) as http:
        wait_for(lambda: http.get("/readyz").json()["running_requests"] == 0)  # aborted
    # Each forward from now on computes only its own prompt: no chunk of the long one rides
    # along. (The first may still meet the chunk that was in flight.) A chunk is MIN_CHUNK
    # tokens at the least; what else may be counted meanwhile is the health checks of the
    # fronts on this server (every 5 s, each a one-token generation: SGLang's /health_generate).
    alone = [forward_alone(sglang_server, 5 + attempt) for attempt in range(3)]
    assert alone[-1] < MIN_CHUNK, alone
    computed = prefilled(sglang_server) - before - sum(5 + a for a in range(3))
    assert 0 < computed < prompt_tokens / 2, (computed, prompt_tokens)


def forward_alone(sglang: ServerProcess, tokens: int) -> float:
    """Prefills `tokens` new tokens on SGLang's own server: the prompt tokens its scheduler
    computed meanwhile beyond them."""
    before = prefilled(sglang)
    ids = [1000 + int(before) % 40000 + i for i in range(tokens)]  # never cached before
    response = httpx.post(
        f"{sglang.origin}/generate",
        json={"input_ids": ids, "sampling_params": {"max_new_tokens": 1}},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return prefilled(sglang) - before - tokens


def test_a_request_that_waits_past_the_bound_is_dropped_unstarted(
    tls_server: ServerProcess, trust: ssl.SSLContext
) -> None:
    """On the node whose runtime runs one request at a time and lets the next wait 1 s at most
    (tests/api/conftest.py)."""
    with httpx.Client(base_url=tls_server.origin, verify=trust, timeout=120) as http:
        model = http.get("/v1/infer/models").json()["data"][0]["id"]
        running: dict[str, Any] = {"after": 0, "chunks": []}
        first_token, dropped = threading.Event(), threading.Event()

        def answer_long() -> None:
            # Counting to 500: seconds of decode, several times the bound, however fast a step;
            # read until it has streamed on past the other's refusal (or to its end).
            body = {"model": model, "max_tokens": 600, "temperature": 0, "stream": True}
            with httpx.Client(base_url=tls_server.origin, verify=trust, timeout=120) as client:
                with client.stream("POST", "/v1/infer/chat/completions",
                                   json={**body, "messages": COUNTING}) as response:  # fmt: skip
                    first_token.set()  # the head comes with the first token
                    running["status"] = response.status_code
                    for line in response.iter_lines():
                        running["last"] = line or running.get("last")
                        if not line.startswith("data: {"):
                            continue
                        running["chunks"].append(orjson.loads(line.removeprefix("data: ")))
                        if dropped.is_set():
                            running["after"] += 1
                            if running["after"] == STREAMED_ON:
                                return

        runner = threading.Thread(target=answer_long)
        runner.start()
        assert first_token.wait(timeout=120)
        waiting = http.post(
            "/v1/infer/chat/completions",
            json={"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]},
        )
        dropped.set()
        runner.join(timeout=180)
        wait_for(lambda: http.get("/readyz").json()["running_requests"] == 0)  # ended or aborted
        entry = http.get(f"/v1/requests/{waiting.headers['x-request-id']}").json()
    assert waiting.status_code == 503, waiting.text
    error = waiting.json()["error"]
    assert error["code"] == "infer_backend_unavailable"
    assert "without being started" in error["message"]
    assert "retry-after" not in waiting.headers  # a retry would join the same queue
    assert entry["status"] == "failed"
    # The request running meanwhile was not disturbed: it streams on, or had ended whole.
    assert running["status"] == 200
    assert running["after"] == STREAMED_ON or running["last"] == "data: [DONE]", running["last"]
    assert all("error" not in chunk for chunk in running["chunks"]), running["chunks"][-3:]


def test_a_prefill_longer_than_the_bound_is_not_refused(
    tls_server: ServerProcess, trust: ssl.SSLContext
) -> None:
    """A prompt that takes longer than --max-queue-wait (1 s here) to prefill is answered: the
    bound counts its wait in the queue, not its own prefill."""
    with httpx.Client(base_url=tls_server.origin, verify=trust, timeout=300) as http:
        model = http.get("/v1/infer/models").json()["data"][0]["id"]
        body = {
            "model": model,
            "max_tokens": 2,
            "messages": [{"role": "user", "content": long_prompt("patient", PATIENT_PROMPT_NOTES)}],
        }
        response = http.post("/v1/infer/chat/completions", json=body)
    assert response.status_code == 200, response.text
    timing = dict(part.split(";dur=") for part in response.headers["server-timing"].split(", "))
    if float(timing["ttft"]) < 1000:
        pytest.skip("this machine prefilled the prompt within the 1 s bound: nothing to show")

"""The remote engine behind sglang-router (tests/topology.py: two real SGLang workers, the real
router, cache-aware): what only a router topology shows. The front learns its limits from the
workers, not from the model or the router; answers through the router are the workers' own, byte
for byte; a client that leaves is aborted at its worker at once; readiness and load come from
the workers; a front on another model is refused at start. The rest of the API suite runs
through this topology too."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from tests.api.conventions import wait_for
from tests.api.sse import events
from tests.server_process import ServerProcess
from tests.topology import WORKER_CONTEXT, RouterTopology, busy

pytestmark = pytest.mark.router_only

# A prompt whose greedy answer meets no near-tie (each step's two best logits several bf16 steps
# apart, checked when it was chosen), so that two workers whose caches hold different prefixes
# still agree: a tie a step apart goes either way with the batch a token is computed in
# (docs/api.md: sampling parameters).
QUESTION = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
ANSWER_TOKENS = 24
# A client that leaves is aborted at its worker well before the router would notice the closed
# connection (5-10 s): the bound, measured at 0.2-0.3 s here.
ABORT_BOUND_S = 1.0
LONG = [
    {"role": "user", "content": "Count from 1 to 500, separated by commas."},
    {"role": "assistant", "content": "1, 2, 3, 4, 5"},
]


def worker_answer(worker: ServerProcess, messages: list[dict[str, Any]]) -> str:
    """The worker's own greedy answer: its rendering of the chat, its /generate."""
    with httpx.Client(base_url=worker.origin, timeout=120) as client:
        rendered = client.post(
            "/v1/tokenize", json={"messages": messages, "add_generation_prompt": True}
        )
        body = {
            "input_ids": rendered.json()["tokens"],
            "sampling_params": {"max_new_tokens": ANSWER_TOKENS, "temperature": 0},
        }
        return str(client.post("/generate", json=body).json()["text"])


def test_the_window_is_the_workers_not_the_models(http: httpx.Client, model: str) -> None:
    card = http.get("/v1/infer/models").json()["data"][0]
    assert card["context_length"] == WORKER_CONTEXT  # the model's own config says 32,768
    long_prompt = [{"role": "user", "content": "hello " * 5000}]  # within 32,768, not 4,096
    counted = http.post(
        "/v1/infer/v1/messages/count_tokens", json={"model": model, "messages": long_prompt}
    ).json()["input_tokens"]
    for path, shape in (("/v1/infer/v1/messages", "anthropic"), ("/v1/infer/chat/completions", "")):
        refused = http.post(path, json={"model": model, "max_tokens": 8, "messages": long_prompt})
        assert refused.status_code == 400, refused.text
        body = refused.json()
        code = body["b3os"]["code"] if shape else body["error"]["code"]
        assert code == "context_length_exceeded"
        message = body["error"]["message"]
        match = re.fullmatch(r"prompt is too long: (\d+) tokens > (\d+) maximum", message)
        assert match is not None, message
        assert int(match.group(1)) == counted
        assert int(match.group(2)) < WORKER_CONTEXT


def test_the_start_log_names_where_each_fact_came_from(server: ServerProcess) -> None:
    log = server.log_text()
    assert f"context {WORKER_CONTEXT} tokens" in log
    assert "from the workers' /server_info and /v1/models" in log
    assert "seeds honoured: from the workers' /server_info" in log
    assert "renders and tokenizes chats as this server does" in log
    assert "aborts, readiness and load: asked of each worker" in log


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("protocol", ["messages", "chat"])
def test_a_greedy_answer_is_the_workers_own_byte_for_byte(
    http: httpx.Client,
    router_topology: RouterTopology,
    model: str,
    protocol: str,
    stream: bool,
) -> None:
    # Each worker answers twice: on a CPU the request that fills a prompt's prefix cache may
    # differ from its repeats (docs/api.md: sampling parameters); the repeats are the answer.
    own = {w.origin: [worker_answer(w, QUESTION) for _ in "12"][1] for w in router_topology.workers}
    assert len(set(own.values())) == 1, own  # the same model on both workers
    expected = next(iter(own.values()))
    body = {
        "model": model,
        "max_tokens": ANSWER_TOKENS,
        "temperature": 0,
        "messages": QUESTION,
        "stream": stream,
    }
    path = "/v1/infer/v1/messages" if protocol == "messages" else "/v1/infer/chat/completions"
    if not stream:
        answer = http.post(path, json=body).json()
        if protocol == "messages":
            text = "".join(block["text"] for block in answer["content"])
        else:
            text = answer["choices"][0]["message"]["content"]
    else:
        with http.stream("POST", path, json=body) as response:
            assert response.status_code == 200
            text = "".join(_text_delta(protocol, data) for _, data in events(response))
    assert text.encode() == expected.encode()


def _text_delta(protocol: str, data: Any) -> str:
    if data == "[DONE]":
        return ""
    if protocol == "messages":
        delta = data.get("delta", {}) if data.get("type") == "content_block_delta" else {}
        return str(delta.get("text", ""))
    choices = data.get("choices") or [{}]
    return str(choices[0].get("delta", {}).get("content") or "")


def test_what_the_router_drops_is_refused_or_carried_another_way(
    http: httpx.Client, server: ServerProcess, model: str
) -> None:
    """sglang-router 0.3.2 drops `logit_bias` and `structural_tag` from what it forwards (the
    start-time probes find it): the first is refused, never silently ignored; grammars travel as
    EBNF (the tool, JSON and thinking tests pass through this topology)."""
    body = {"model": model, "max_tokens": 4, "messages": QUESTION, "logit_bias": {"1": -100}}
    refused = http.post("/v1/infer/chat/completions", json=body)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("unsupported_parameter", "logit_bias")
    assert "does not carry it" in error["message"]
    assert "the router carries structural tags: no" in server.log_text()


def test_a_client_that_leaves_is_aborted_at_its_worker(
    server: ServerProcess, router_topology: RouterTopology, model: str
) -> None:
    body = {"model": model, "max_tokens": 2000, "temperature": 0, "stream": True, "messages": LONG}
    with httpx.Client(base_url=server.origin, timeout=60) as client:
        with client.stream("POST", "/v1/infer/v1/messages", json=body) as stream:
            # Read by hand, the reader kept: leaving a loop over it would close the connection.
            reader = events(stream)
            deltas = 0
            while deltas < 3:
                name, _ = next(reader)
                deltas += name == "content_block_delta"
            assert sum(busy(w) for w in router_topology.workers) == 1
    left = time.monotonic()
    wait_for(lambda: sum(busy(w) for w in router_topology.workers) == 0, timeout=ABORT_BOUND_S)
    print(f"aborted at the worker {time.monotonic() - left:.3f} s after the client left")


def test_load_and_readiness_come_from_the_workers(
    http: httpx.Client, router_topology: RouterTopology, model: str
) -> None:
    assert http.get("/readyz").json()["status"] == "ready"
    body = {"model": model, "max_tokens": 2000, "temperature": 0, "stream": True, "messages": LONG}
    with http.stream("POST", "/v1/infer/v1/messages", json=body) as stream:
        reader = events(stream)
        while next(reader)[0] != "content_block_delta":
            pass
        metrics = http.get("/metrics").text
    running = re.search(r"^b3os_infer_engine_requests (\S+)$", metrics, re.MULTILINE)
    queued = re.search(r"^b3os_infer_engine_queue_depth (\S+)$", metrics, re.MULTILINE)
    assert running is not None and queued is not None
    assert float(running.group(1)) >= 1  # what the workers report, not -1 (not known)
    assert float(queued.group(1)) >= 0


def test_a_front_on_another_model_is_refused_at_start(
    router_topology: RouterTopology, tmp_path_factory: pytest.TempPathFactory, engine: str
) -> None:
    """The same tokenizer with another chat template: the workers would be sent prompts their
    model was not trained on."""
    del engine  # run with the router variant of the suite
    info = httpx.get(f"{router_topology.workers[0].origin}/server_info", timeout=10).json()
    folder = _model_with_another_template(info["model_path"], tmp_path_factory.mktemp("other"))
    front = ServerProcess(
        folder.parent / "front.log",
        "--model", str(folder),
        "--engine", "sglang-remote",
        "--engine-url", router_topology.url,
    )  # fmt: skip
    front.start()
    assert front.wait_exit(timeout=120) == 1
    log = front.log_text()
    assert "renders and tokenizes chats unlike this server" in log
    assert "cannot start" in log


def test_a_window_beyond_the_workers_is_refused_at_start(
    router_topology: RouterTopology, tmp_path_factory: pytest.TempPathFactory, engine: str
) -> None:
    del engine  # run with the router variant of the suite
    front = ServerProcess(
        tmp_path_factory.mktemp("wide") / "front.log",
        "--context-length", str(2 * WORKER_CONTEXT),
        "--engine", "sglang-remote",
        "--engine-url", router_topology.url,
    )  # fmt: skip
    front.start()
    assert front.wait_exit(timeout=120) == 1
    assert f"beyond the {WORKER_CONTEXT} tokens the workers" in front.log_text()


def _model_with_another_template(source: str, folder: Any) -> Any:
    """The model's config and tokenizer (no weights: a remote front loads none), its chat
    template changed: the system turn it adds by default says something else."""
    import json
    import shutil
    from pathlib import Path

    target = Path(folder) / "other-template"
    target.mkdir()
    for file in Path(source).iterdir():
        if file.suffix in (".json", ".txt", ".jinja") and "safetensors" not in file.name:
            shutil.copy(file, target / file.name)
    config_path = target / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    template = config.get("chat_template") or (target / "chat_template.jinja").read_text()
    changed = template.replace("You are a helpful AI assistant", "You are a terse AI assistant")
    assert changed != template
    if "chat_template" in config:
        config["chat_template"] = changed
        config_path.write_text(json.dumps(config))
    else:
        (target / "chat_template.jinja").write_text(changed)
    return target

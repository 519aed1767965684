"""The HTTP side: HTTP/2 with prior knowledge, health and readiness, the models list, the
probe agents send, and errors for unknown routes."""

from __future__ import annotations

import re

import httpx
from jsonschema import Draft202012Validator
from prometheus_client.parser import text_string_to_metric_families

from server.app import create_app
from server.config import Settings
from tests.api.conventions import assert_ids, server_timing
from tests.api.sse import events


def test_http2_prior_knowledge_json_answers(http2: httpx.Client, model: str) -> None:
    body = {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    for path in ("/v1/infer/v1/messages", "/v1/infer/chat/completions"):
        response = http2.post(path, json=body)
        assert response.http_version == "HTTP/2"
        assert response.status_code == 200
        assert_ids(response)


def test_http2_prior_knowledge_streams(http2: httpx.Client, model: str) -> None:
    body = {
        "model": model,
        "max_tokens": 4,
        "stream": True,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    with http2.stream("POST", "/v1/infer/v1/messages", json=body) as response:
        assert response.http_version == "HTTP/2"
        names = [name for name, _ in events(response)]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    with http2.stream("POST", "/v1/infer/chat/completions", json=body) as response:
        assert response.http_version == "HTTP/2"
        assert "ttft" in server_timing(response)
        data = [d for _, d in events(response)]
    assert data[-1] == "[DONE]"


def test_models_lists_the_served_model(http: httpx.Client) -> None:
    response = http.get("/v1/infer/models")
    assert response.status_code == 200
    assert_ids(response)
    body = response.json()
    assert body["object"] == "list"
    [card] = body["data"]
    assert card["object"] == "model"
    assert isinstance(card["id"], str) and card["id"]
    assert card["context_length"] > 0
    assert card["max_request_bytes"] == 10 * 1024 * 1024
    assert isinstance(card["capabilities"], list)
    assert "image_input" not in card["capabilities"]  # the embedded model is text only


def test_health_and_readiness(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"


def test_head_probe_on_the_base_url(http: httpx.Client) -> None:
    response = http.head("/v1/infer")
    assert response.status_code == 200
    assert_ids(response)


def test_unknown_route_and_method_in_the_openai_shape(http: httpx.Client) -> None:
    response = http.get("/v1/infer/nothing")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert_ids(response)
    response = http.get("/v1/infer/v1/messages")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in response.headers["allow"]


def test_request_log_entry(http: httpx.Client, model: str) -> None:
    body = {"model": model, "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]}
    response = http.post("/v1/infer/chat/completions", json=body)
    request_id = assert_ids(response)
    entry = http.get(f"/v1/requests/{request_id}").json()
    usage = response.json()["usage"]
    assert entry["id"] == request_id
    assert entry["status"] == "succeeded"
    assert entry["usage"]["prompt_tokens"] == usage["prompt_tokens"]
    assert entry["usage"]["completion_tokens"] == usage["completion_tokens"]
    assert {"template", "ttft", "model", "total"} <= set(entry["timing"])


def test_openapi_document_covers_every_route(http: httpx.Client) -> None:
    response = http.get("/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.1")
    app = create_app(Settings())
    routes = {
        (re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule), method.lower())
        for rule in app.url_map.iter_rules()
        for method in rule.methods - {"OPTIONS", "HEAD"}
        if rule.endpoint != "static"
    }
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    assert routes - documented == set()
    for path in ("/v1/infer/v1/messages", "/v1/infer/chat/completions"):
        schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        Draft202012Validator.check_schema(schema["schema"])


def test_metrics_read_the_engines_load(http: httpx.Client, model: str) -> None:
    http.post(
        "/v1/infer/chat/completions",
        json={"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]},
    )
    response = http.get("/metrics")
    assert response.status_code == 200
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    assert samples["b3os_infer_engine_queue_depth"] >= 0  # -1 would be: the runtime did not say
    assert samples["b3os_infer_requests_in_flight"] == 0

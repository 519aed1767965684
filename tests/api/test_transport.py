"""The HTTP side: HTTP/2 with prior knowledge, health and readiness, the models list, the
probe agents send, and errors for unknown routes."""

from __future__ import annotations

import contextlib
import re
import socket

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import httpx
import orjson
import pytest
from jsonschema import Draft202012Validator
from prometheus_client.parser import text_string_to_metric_families

from server.app import create_app
from server.config import Settings
from tests.api.conventions import assert_ids, server_timing
from tests.api.sse import events
from tests.server_process import ServerProcess


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


@pytest.mark.every_engine
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
    assert card["route"] == "local"
    assert card["protocols"] == ["messages", "chat.completions", "responses"]


@pytest.mark.every_engine
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


@pytest.mark.every_engine
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


class H2Conversation:
    """HTTP/2 with prior knowledge frame by frame, where a client library would hide what the
    server did to one stream (reset it, or closed the whole connection)."""

    def __init__(self, origin: str) -> None:
        host, port = origin.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.statuses: dict[int, int] = {}
        self.ended: set[int] = set()
        self.resets: dict[int, int] = {}
        self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def post(self, stream_id: int, path: str, length: int, body: bytes, end: bool) -> None:
        headers = [
            (":method", "POST"), (":path", path), (":scheme", "http"), (":authority", "node"),
            ("content-type", "application/json"), ("content-length", str(length)),
        ]  # fmt: skip
        self.conn.send_headers(stream_id, headers)
        self.conn.send_data(stream_id, body, end_stream=end)
        self.flush()

    def until_done(self, stream_id: int) -> None:
        """Reads until the stream's response ended or it was reset; fails if the connection
        closes first."""
        while stream_id not in self.ended and stream_id not in self.resets:
            data = self.sock.recv(65536)
            assert data, f"the server closed the connection; statuses {self.statuses}"
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    self.statuses[event.stream_id] = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.StreamEnded):
                    self.ended.add(event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    self.resets[event.stream_id] = event.error_code
                elif isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(
                        event.flow_controlled_length, event.stream_id
                    )
            self.flush()


def test_http2_early_refusal_costs_only_its_stream(server: ServerProcess, model: str) -> None:
    """A body refused from its Content-Length while the client still sends it: the 413 on its
    stream, which the server then resets with NO_ERROR (RFC 9113 section 8.1), and the client's
    further DATA on it never takes the connection down; the next stream is served."""
    talk = H2Conversation(server.origin)
    talk.post(1, "/v1/infer/v1/messages", 11 * 1024 * 1024, b"{" + b" " * 16_000, end=False)
    talk.until_done(1)
    assert talk.statuses[1] == 413
    with contextlib.suppress(h2.exceptions.StreamClosedError):  # reset by then: fine
        talk.conn.send_data(1, b" " * 16_000)  # still sending, as a client mid-upload does
        talk.flush()
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": "Hi"}]})
    talk.post(3, "/v1/infer/v1/messages/count_tokens", len(body), body, end=True)
    talk.until_done(3)
    assert talk.statuses[3] == 200
    assert talk.resets[1] == h2.errors.ErrorCodes.NO_ERROR
    talk.sock.close()

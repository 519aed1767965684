"""`/openapi.json`: a valid OpenAPI 3.1 document that declares every status, header, body shape
and credential of each operation, and a node that keeps to it: schemathesis, positive and
negative cases on every operation, against a real node with a key store on the replay engine
(no model: it starts in seconds), checking for 5xx, status codes, content types, headers and
bodies as documented."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator
from schemathesis import Case, GenerationMode, Response
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from server.app import create_app
from server.config import Settings
from server.errors import (
    BackendUnavailable,
    EgressDenied,
    Forbidden,
    InferError,
    InternalError,
    InvalidRequest,
    ModelNotAvailable,
    PayloadTooLarge,
    RateLimited,
    RouteNotFound,
    Unauthorized,
    UnsupportedMediaType,
)
from server.openapi import document
from server.protocols.anthropic.encode import error_body as anthropic_error
from server.protocols.openai.encode import error_body as openai_error
from tests.server_process import ServerProcess

MESSAGES = ("/v1/infer/v1/messages", "/v1/infer/v1/messages/count_tokens")
CHAT = "/v1/infer/chat/completions"
RESPONSES = "/v1/infer/responses"
EVENT_STREAM = "text/event-stream"
GENERATION = (MESSAGES[0], CHAT, RESPONSES)
INFER = {"200", "400", "401", "403", "404", "413", "415", "429", "500", "503"}
# What each operation can answer (server/routes, server/app.py, server/auth, admission).
STATUSES = {
    ("post", MESSAGES[0]): INFER,
    ("post", MESSAGES[1]): INFER - {"429"},  # free: no admission
    ("post", CHAT): INFER,
    ("post", RESPONSES): INFER,
    ("get", "/v1/infer/models"): {"200", "401", "403", "500", "503"},
    ("get", "/v1/requests/{request_id}"): {"200", "401", "403", "404", "500"},
    ("head", "/v1/infer"): {"200"},
    ("get", "/healthz"): {"200"},
    ("get", "/readyz"): {"200", "503"},
    ("get", "/openapi.json"): {"200"},
    ("get", "/metrics"): {"200"},
}
KEYED = {
    (method, path) for method, path in STATUSES if path.startswith("/v1/") and method != "head"
}
REQUEST_ID = "req_01m8rs5y9b6p8ehz2es3mqxpz0"
# One error each status stands for, as the routes raise it.
ERRORS: dict[str, list[InferError]] = {
    "400": [InvalidRequest("bad", param="messages.0")],
    "401": [Unauthorized("no key", headers={"WWW-Authenticate": "Bearer"})],
    "403": [Forbidden("scope"), EgressDenied("egress", param="messages.0.content.0")],
    "404": [ModelNotAvailable("m", param="model"), RouteNotFound("no request")],
    "413": [PayloadTooLarge("too large")],
    "415": [UnsupportedMediaType("not json")],
    "429": [RateLimited("rpm", retry_after=3)],
    "500": [InternalError.for_request(REQUEST_ID)],
    "503": [BackendUnavailable("starting", retry_after=5)],
}

# Bounds of the schemathesis run: its coverage phase (each operation's edge cases, about 2,400
# in all) and this many fuzzed cases per operation; deterministic, so a failure reproduces.
FUZZED_PER_OPERATION = 60
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def operation(method: str, path: str) -> dict[str, Any]:
    found: dict[str, Any] = document()["paths"][path][method]
    return found


def rendered(path: str, error: InferError) -> dict[str, Any]:
    """The error body as server.app renders it on `path`."""
    if path in MESSAGES and not error.before_infer:
        return anthropic_error(error, REQUEST_ID)
    return openai_error(error)


# --- the document ----------------------------------------------------------------------------


def test_the_document_is_valid_openapi_3_1() -> None:
    OpenAPIV31SpecValidator(document()).validate()  # the meta-schema, and what it cannot state


def test_every_route_is_an_operation() -> None:
    app = create_app(Settings())
    routes = {
        (method.lower(), re.sub(r"<(\w+)>", r"{\1}", rule.rule))  # Quart's <name>, {name}
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in rule.methods or ()
        if method != "OPTIONS" and (method != "HEAD" or rule.methods == {"HEAD", "OPTIONS"})
    }
    documented = {
        (method, path)
        for path, item in document()["paths"].items()
        for method in item.keys() - {"parameters"}
    }
    assert routes == documented


def test_the_request_log_route_declares_its_path_parameter() -> None:
    [parameter] = document()["paths"]["/v1/requests/{request_id}"]["parameters"]
    assert parameter["name"] == "request_id"
    assert parameter["in"] == "path"
    assert parameter["required"] is True
    assert parameter["schema"]["pattern"] == "^req_[0-9a-hjkmnp-tv-z]{26}$"


@pytest.mark.parametrize(("method", "path"), sorted(STATUSES))
def test_each_operation_lists_the_statuses_it_answers(method: str, path: str) -> None:
    assert set(operation(method, path)["responses"]) == STATUSES[(method, path)]


@pytest.mark.parametrize(("method", "path"), sorted(STATUSES))
def test_every_response_carries_the_request_id(method: str, path: str) -> None:
    for response in operation(method, path)["responses"].values():
        assert response["headers"]["x-request-id"]["required"] is True
        assert response["headers"]["request-id"]["required"] is True


@pytest.mark.parametrize(("method", "path"), sorted(KEYED))
def test_errors_are_declared_in_the_shape_the_route_renders(method: str, path: str) -> None:
    responses = operation(method, path)["responses"]
    for status, errors in ERRORS.items():
        if status not in responses:
            continue
        validator = Draft202012Validator(responses[status]["content"]["application/json"]["schema"])
        for error in errors:
            assert error.status == int(status)
            body = rendered(path, error)
            assert not list(validator.iter_errors(body)), (status, body)


@pytest.mark.parametrize("path", [*MESSAGES, CHAT, RESPONSES])
def test_only_the_messages_routes_declare_the_anthropic_shape(path: str) -> None:
    """On the Messages routes, either shape (refusals before the infer layer are OpenAI's)."""
    responses = operation("post", path)["responses"]
    for status in responses.keys() - {"200"}:
        validator = Draft202012Validator(responses[status]["content"]["application/json"]["schema"])
        error = ERRORS[status][0]
        assert validator.is_valid(anthropic_error(error, REQUEST_ID)) is (path in MESSAGES)
        assert validator.is_valid(openai_error(error))


@pytest.mark.parametrize("path", GENERATION)
def test_generation_answers_json_or_an_event_stream(path: str) -> None:
    content = operation("post", path)["responses"]["200"]["content"]
    assert set(content) == {"application/json", "text/event-stream"}
    assert "RateLimit-Remaining" in operation("post", path)["responses"]["200"]["headers"]


@pytest.mark.parametrize(("method", "path"), sorted(STATUSES))
def test_retry_after_is_declared_where_the_node_sends_it(method: str, path: str) -> None:
    for status, response in operation(method, path)["responses"].items():
        sends = status == "429" or (status == "503" and path != "/readyz")
        assert ("Retry-After" in response["headers"]) is sends, status
    if "429" in operation(method, path)["responses"]:
        headers = operation(method, path)["responses"]["429"]["headers"]
        assert {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} <= set(headers)
    if "401" in operation(method, path)["responses"]:
        assert "WWW-Authenticate" in operation(method, path)["responses"]["401"]["headers"]


def test_the_key_schemes_are_bearer_and_x_api_key() -> None:
    schemes = document()["components"]["securitySchemes"]
    assert (schemes["apiKey"]["type"], schemes["apiKey"]["scheme"]) == ("http", "bearer")
    header = schemes["xApiKey"]
    assert (header["type"], header["in"], header["name"]) == ("apiKey", "header", "x-api-key")
    assert "security" not in document()  # the open routes take no key


@pytest.mark.parametrize(("method", "path"), sorted(STATUSES))
def test_the_routes_that_take_a_key_say_so(method: str, path: str) -> None:
    security = operation(method, path).get("security")
    if (method, path) in KEYED:
        assert security == [{"apiKey": []}, {"xApiKey": []}]
    else:
        assert security is None


# --- the node keeps to it --------------------------------------------------------------------


# The node's keys: acme's with both scopes, with infer:run or infer:read only, and one of an
# organization allowed one request a minute.
KEYS = {
    "acme": ("acme", "infer:run,infer:read"),
    "run-only": ("acme", "infer:run"),
    "read-only": ("acme", "infer:read"),
    "limited": ("limited", "infer:run,infer:read"),
}
LIMITS = "[orgs.limited]\nrequests_per_minute = 1\n"


@dataclass
class Node:
    process: ServerProcess
    keys: dict[str, str]
    model: str


def create_key(db: Path, org: str, scopes: str) -> str:
    command = ["keys", "create", "--db", str(db), "--org", org, "--project", "p1"]
    created = subprocess.run(
        [sys.executable, "-m", "server", *command, "--scopes", scopes],
        capture_output=True,
        text=True,
        check=True,
    )
    return created.stdout.strip()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A node with a key store and limits, on the replay engine."""
    folder = tmp_path_factory.mktemp("openapi")
    db, limits = folder / "node.db", folder / "limits.toml"
    limits.write_text(LIMITS)
    keys = {name: create_key(db, org, scopes) for name, (org, scopes) in KEYS.items()}
    args = ["--engine", "replay", "--db", str(db), "--limits", str(limits)]
    with ServerProcess(folder / "node.log", *args).running() as process:
        headers = {"Authorization": f"Bearer {keys['acme']}"}
        models = httpx.get(f"{process.base_url}/models", headers=headers).json()
        yield Node(process, keys, models["data"][0]["id"])


def test_the_node_serves_the_document(node: Node) -> None:
    assert httpx.get(f"{node.process.origin}/openapi.json").json() == document()


@dataclass
class Traffic:
    """What the run sends beyond what schemathesis generates, to reach what random bodies and
    keys never would. Of every 8 cases, one keeps the credentials generated (401), one has a
    key without the route's scope (403), one the limited organization's key (429 on the
    generation routes, 404 on acme's requests), the rest acme's key with both scopes, as Bearer
    or x-api-key by turns; the document's examples always go with acme's key. 3 in 4 positive
    bodies name the served model (a third of those on the generation routes streamed), and 1 in
    2 positive request log and kept response lookups name a request or response the run
    made."""

    node: Node
    cases: int = 0
    request_ids: list[str] = field(default_factory=list)
    response_ids: list[str] = field(default_factory=list)  # kept (store is OpenAI's default)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    streams: Counter[str] = field(default_factory=Counter)  # event streams answered

    def prepare(self, case: Case) -> None:
        self.cases += 1
        turn = self.cases % 8
        if case.meta is not None and case.meta.phase.name == "examples":
            turn = 4
        if turn:
            self._authenticate(case, turn)
        if case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE:
            self._aim(case, turn)

    def _authenticate(self, case: Case, turn: int) -> None:
        if turn == 1:
            name = "run-only" if case.method.upper() == "GET" else "read-only"
        else:
            name = "limited" if turn == 7 else "acme"
        headers = {
            header: value
            for header, value in (case.headers or {}).items()
            if header.lower() not in ("authorization", "x-api-key")
        }
        if turn % 2:
            headers["x-api-key"] = self.node.keys[name]
        else:
            headers["Authorization"] = f"Bearer {self.node.keys[name]}"
        case.headers = headers

    def _aim(self, case: Case, turn: int) -> None:
        if isinstance(case.body, dict) and "model" in case.body and turn % 4:
            case.body["model"] = self.node.model
            if case.operation.path in GENERATION and turn in (2, 5):
                case.body["stream"] = True
        for name, made in (("request_id", self.request_ids), ("response_id", self.response_ids)):
            if case.path_parameters and name in case.path_parameters and made and turn % 2:
                case.path_parameters[name] = made[self.cases % len(made)]

    def record(self, case: Case, response: Response) -> None:
        self.statuses[(case.operation.path, response.status_code)] += 1
        if case.operation.path in GENERATION and response.status_code == 200:
            self.request_ids.append(response.headers["x-request-id"][0])
            if case.operation.path == RESPONSES:
                ulid = response.headers["x-request-id"][0].removeprefix("req_")
                self.response_ids.append(f"resp_{ulid}")
            if response.headers["content-type"][0].startswith(EVENT_STREAM):
                self.streams[case.operation.path] += 1


@pytest.fixture(scope="module")
def traffic(node: Node) -> Traffic:
    return Traffic(node)


def configured() -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": 20260101,
            "suppress-health-check": ["all"],
            "max-stream-events": 1000,  # every event of a stream (256 pieces at most) is checked
            "request-timeout": 30,
            "generation": {
                "mode": "all",
                "max-examples": FUZZED_PER_OPERATION,
                "deterministic": True,
                "no-shrink": True,  # a failure prints its case as found: shrinking takes minutes
                "database": "none",
            },
        }
    )


# The document built here is the one the node serves (test_the_node_serves_the_document); the
# node's port is known only once it runs, so each call names it. (schemathesis.pytest's
# from_fixture, which would load it from the node, does not run on pytest 9.2.)
schema = schemathesis.openapi.from_dict(document(), config=configured())


@pytest.mark.timeout(120)  # per operation; the whole run takes about a minute on two cores
@schema.parametrize()
def test_the_node_answers_as_documented(case: Case, node: Node, traffic: Traffic) -> None:
    traffic.prepare(case)
    response = case.call_and_validate(base_url=node.process.origin, checks=CHECKS)
    traffic.record(case, response)


def test_the_run_reached_every_kind_of_answer(traffic: Traffic) -> None:
    """The run above checked real answers, not only refusals of random bodies."""
    if not traffic.cases:
        pytest.skip("test_the_node_answers_as_documented did not run")
    reached = {status for _, status in traffic.statuses}
    assert {200, 400, 401, 403, 404, 415, 429} <= reached, traffic.statuses
    looked_up = ("/v1/requests/{request_id}", f"{RESPONSES}/{{response_id}}")
    for path in (*MESSAGES, CHAT, RESPONSES, "/v1/infer/models", *looked_up):
        assert traffic.statuses[(path, 200)], (path, traffic.statuses)
    for path in GENERATION:
        assert traffic.streams[path], (path, traffic.streams)

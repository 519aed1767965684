"""The real Claude Code CLI (npm, tests/node: the oldest and the newest version tested) against a
node started with `--compat claude-code`, on the embedded model: headless runs exit cleanly and
are served; the full prompts both versions send (captured from them, far past the model's
window) get exactly the context error agents compact on, and count_tokens counts them exactly;
tool search (deferred tools, tool_reference results) behaves as Anthropic documents it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import served
from tests.api.contract import MODEL
from tests.capture import capturing
from tests.conftest import repo_root
from tests.server_process import ServerProcess

pytestmark = pytest.mark.remote_only  # a front of its own on the session's SGLang server

VERSIONS = ("2.1.197", "2.1.332")  # tests/node/package.json
TOO_LONG = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
MAX_OUTPUT = 64  # a one-word reply; a cut turn is retried by the CLI, each retry this long
MAX_TOKENS_VERDICT = (
    f"API Error: Claude's response exceeded the {MAX_OUTPUT} output token maximum. To configure"
    " this behavior, set the CLAUDE_CODE_MAX_OUTPUT_TOKENS environment variable."
)
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"url": {"type": "string"}}}


def claude(version: str, base_url: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Claude Code headless, configured as the README says, in a home of its own."""
    binary = repo_root() / f"tests/node/node_modules/claude-code-{version}/bin/claude.exe"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd / "home"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "x",
        "ANTHROPIC_MODEL": MODEL,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(MAX_OUTPUT),
        "CLAUDE_CODE_DISABLE_THINKING": "1",  # the embedded model does not close a reasoning
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    return subprocess.run(
        [str(binary), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def served_messages(node: ServerProcess) -> list[str]:
    """The request ids of Messages requests the node answered 200 (its access log)."""
    return served(node, "/v1/infer/v1/messages")


@pytest.mark.parametrize("version", VERSIONS)
def test_claude_code_runs_headless_against_the_node(
    agent_node: ServerProcess, version: str, tmp_path: Path, engine: str
) -> None:
    del engine  # run with the remote variant of the suite
    before = set(served_messages(agent_node))
    done = claude(
        version,
        agent_node.base_url,
        tmp_path,
        "--bare", "-p", "Say hi.",
        "--system-prompt", "Reply with one word.",
        "--tools", "Bash",
    )  # fmt: skip
    output = done.stdout + done.stderr
    new = [rid for rid in served_messages(agent_node) if rid not in before]
    assert new, agent_node.log_tail()
    with httpx.Client(base_url=agent_node.origin, timeout=30) as client:
        entries = [client.get(f"/v1/requests/{rid}").json() for rid in new]
    assert all(entry["status"] == "succeeded" for entry in entries), entries
    # Claude Code samples at temperature 1 and sends no seed, so whether the model ends its turn
    # within MAX_OUTPUT tokens is the model's draw, not the node's. Either way the CLI must have
    # read the node's answer as served: an ended turn exits 0; a cut one is the CLI's own
    # max-tokens verdict on a stop_reason max_tokens the node really sent, never another error.
    if done.returncode == 0:
        assert "API Error" not in output, output
        return
    assert MAX_TOKENS_VERDICT in output and output.count("API Error") == 1, output
    # (the CLI retries a cut turn a few times before its verdict)
    assert entries[-1]["finish_reason"] == "max_tokens", entries
    cut = [e for e in entries if e["finish_reason"] == "max_tokens"]
    assert all(e["usage"]["completion_tokens"] == MAX_OUTPUT for e in cut), entries


@pytest.fixture(scope="module")
def full_prompts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """What each version sends for one prompt with its whole default setup (tools, system
    prompt, environment): captured from the CLI itself."""
    found: dict[str, list[dict[str, Any]]] = {}
    for version in VERSIONS:
        with capturing() as capture:
            folder = tmp_path_factory.mktemp(f"capture-{version}")
            done = claude(version, f"http://127.0.0.1:{capture.server_port}", folder, "-p", "Hi")
            assert done.returncode == 0, done.stdout + done.stderr
            found[version] = [
                body
                for path, body in capture.captured
                if path.startswith("/v1/messages") and "count_tokens" not in path
            ]
        assert found[version]
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_claude_codes_full_prompt_is_refused_exactly_and_counted_exactly(
    agent_node: ServerProcess,
    full_prompts: dict[str, list[dict[str, Any]]],
    version: str,
    engine: str,
) -> None:
    """Past the window (8,192): the 400 agents compact on, never another, and the count."""
    del engine
    with httpx.Client(base_url=agent_node.origin, timeout=120) as client:
        for body in full_prompts[version]:
            refused = client.post("/v1/infer/v1/messages?beta=true", json=body)
            assert refused.status_code == 400, refused.text
            error = refused.json()
            assert error["b3os"]["code"] == "context_length_exceeded", error
            match = TOO_LONG.fullmatch(error["error"]["message"])
            assert match is not None, error
            counted = {k: v for k, v in body.items() if k not in ("max_tokens", "stream")}
            count = client.post("/v1/infer/v1/messages/count_tokens?beta=true", json=counted)
            assert count.status_code == 200, count.text
            assert count.json()["input_tokens"] == int(match.group(1))
            print(f"Claude Code {version}: {match.group(1)} prompt tokens")


def tool_search_body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    tools = [
        {"name": "ToolSearch", "input_schema": {"type": "object", "properties": {}}},
        {"name": "DeferredToolPlaceholder", "input_schema": SCHEMA, "defer_loading": True},
        {"name": "WebFetch", "description": "Fetch a URL.", "input_schema": SCHEMA,
         "defer_loading": True},
    ]  # fmt: skip
    return {"model": MODEL, "max_tokens": 48, "messages": messages, "tools": tools, **extra}


ASK = [{"role": "user", "content": "Fetch https://example.com"}]
LOADED = [
    *ASK,
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {}}],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
            }
        ],
    },
]


def test_a_deferred_tool_is_shown_and_callable_only_once_a_tool_reference_loads_it(
    agent_node: ServerProcess, engine: str
) -> None:
    del engine
    with httpx.Client(base_url=agent_node.origin, timeout=120) as client:

        def count(body: dict[str, Any]) -> int:
            body = {k: v for k, v in body.items() if k != "max_tokens"}
            response = client.post("/v1/infer/v1/messages/count_tokens", json=body)
            assert response.status_code == 200, response.text
            return int(response.json()["input_tokens"])

        searched = tool_search_body(ASK)
        shown_alone = {**searched, "tools": searched["tools"][:1]}
        assert count(searched) == count(shown_alone)  # deferred tools are not in the prompt
        named = {"type": "tool", "name": "WebFetch"}
        refused = client.post(
            "/v1/infer/v1/messages", json=tool_search_body(ASK, tool_choice=named)
        )
        assert refused.status_code == 400  # not loaded: not one of the tools the model has
        loaded = client.post(
            "/v1/infer/v1/messages", json=tool_search_body(LOADED, tool_choice=named)
        )
        assert loaded.status_code == 200, loaded.text
        calls = [block for block in loaded.json()["content"] if block["type"] == "tool_use"]
        assert [call["name"] for call in calls] == ["WebFetch"]


def test_safeguards_are_accepted_with_the_profile_and_refused_without(
    agent_node: ServerProcess, server: ServerProcess, model: str
) -> None:
    body = {"model": model, "max_tokens": 4, "messages": ASK, "safeguards": {"mode": "on"}}
    with httpx.Client(timeout=120) as client:
        assert client.post(f"{agent_node.base_url}/v1/messages", json=body).status_code == 200
        refused = client.post(f"{server.base_url}/v1/messages", json=body)
    assert refused.status_code == 400
    assert refused.json()["b3os"] == {"code": "unsupported_parameter", "param": "safeguards"}

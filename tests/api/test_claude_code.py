"""The real Claude Code CLI (npm, tests/node: the newest and the oldest version tested) against
the agents' node (docs/agents.md's node command, on the embedded model's twin: its tokenizer,
template and 32,768-token window; tests/api/conftest.py), with docs/agents.md's environment:
`claude -p` with its whole default setup is served to its end, every request in full and counted
exactly; the oldest version's whole setup fits the window too; tool search (deferred tools,
tool_reference results) behaves as Anthropic documents it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent_clis import claude
from tests.api import readme
from tests.api.conftest import AGENT_MAX_OUTPUT_TOKENS, served
from tests.api.contract import MODEL
from tests.capture import capturing, recording
from tests.server_process import ServerProcess

pytestmark = [pytest.mark.remote_only, pytest.mark.usefixtures("with_the_remote_engines_tests")]

NEWEST, OLDEST = "2.1.332", "2.1.197"  # tests/node/package.json
# What Claude Code says of answers that ended at the node's cap: it asks again up to three times,
# then reports its own maximum (not the node's).
CUT = re.compile(r"API Error: Claude's response exceeded the \d+ output token maximum")
OLD_WINDOW = 8192  # the embedded model's own, which its whole setup was refused past
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"url": {"type": "string"}}}


def count(client: httpx.Client, body: dict[str, Any]) -> int:
    counted = {k: v for k, v in body.items() if k not in ("max_tokens", "stream")}
    response = client.post("/v1/infer/v1/messages/count_tokens?beta=true", json=counted)
    assert response.status_code == 200, response.text
    return int(response.json()["input_tokens"])


def test_claude_code_with_its_whole_setup_is_served_to_its_end(
    agent_node: ServerProcess, tmp_path: Path
) -> None:
    """docs/agents.md's `claude -p`, no --bare: its first request is past the embedded model's own
    window, and is served whole; Claude Code reads the answer as served."""
    route = "/v1/infer/v1/messages"
    before = set(served(agent_node, route))
    with recording(agent_node.origin) as proxy:
        url = f"http://127.0.0.1:{proxy.server_port}/v1/infer"
        done = claude(NEWEST, url, tmp_path, "-p", "Say hi.")
    output = done.stdout + done.stderr
    assert "assumes a context window" not in output, output  # docs/agents.md gives it the window
    new = [rid for rid in served(agent_node, route) if rid not in before]
    sent = [body for path, body in proxy.captured if "count_tokens" not in path]
    assert new and len(new) == len(sent), (output, agent_node.log_tail())
    with httpx.Client(base_url=agent_node.origin, timeout=120) as client:
        entries = [client.get(f"/v1/requests/{rid}").json() for rid in new]
        assert all(entry["status"] == "succeeded" for entry in entries), entries
        for body, entry in zip(sent, entries, strict=True):
            assert entry["usage"]["prompt_tokens"] == count(client, body), entry
    first = entries[0]["usage"]["prompt_tokens"]
    assert first > OLD_WINDOW, entries[0]  # the whole setup, not a shrunk one
    assert "defer_loading" in str(sent[0]["tools"])
    assert sent[0]["max_tokens"] > int(readme.node_flag("max-output-tokens"))  # the node's cap
    print(f"Claude Code {NEWEST}: {[entry['usage'] for entry in entries]}")
    # The twin's random answers run to the node's cap; a model that ends its turn within it has
    # Claude Code exit 0 with the answer. Either way the CLI read the answers as served: cut
    # ones are asked again, then reported as cut.
    if done.returncode == 0:
        assert "API Error" not in output and done.stdout.strip(), output
        return
    assert CUT.search(output) and output.count("API Error") == 1, output
    assert entries[-1]["finish_reason"] == "max_tokens", entries
    cut = [e for e in entries if e["finish_reason"] == "max_tokens"]
    assert all(e["usage"]["completion_tokens"] == AGENT_MAX_OUTPUT_TOKENS for e in cut), entries


def test_a_new_claude_code_session_reads_the_last_ones_prompt_from_the_cache(
    agent_node: ServerProcess, tmp_path: Path
) -> None:
    """Two sessions one after the other, each asking something else: Claude Code's first system
    block (its attribution, with a hash of the first user message) differs between them; the
    node leaves it out, so the second session's first request is read from the cache up to its
    own question, as the request log and the answer's usage say."""
    route = "/v1/infer/v1/messages"
    firsts: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for ask in ("Say hi, please.", "Tell me a river fact."):
        before = set(served(agent_node, route))
        with recording(agent_node.origin) as proxy:
            url = f"http://127.0.0.1:{proxy.server_port}/v1/infer"
            done = claude(
                NEWEST, url, tmp_path, "--bare", "-p", ask,
                "--system-prompt", "Reply with one word.", "--tools", "Bash",
            )  # fmt: skip
        assert done.returncode == 0 or CUT.search(done.stdout + done.stderr), done.stderr
        [first_id, *_] = [rid for rid in served(agent_node, route) if rid not in before]
        with httpx.Client(base_url=agent_node.origin, timeout=30) as client:
            entry = client.get(f"/v1/requests/{first_id}").json()
        [body, *_] = [body for path, body in proxy.captured if "count_tokens" not in path]
        firsts.append((body, entry))
    (one, _), (two, entry) = firsts
    assert one["system"][0] != two["system"][0]  # the attribution changed with the question
    assert one["system"][0]["text"].startswith("x-anthropic-billing-header:")
    assert one["system"][1:] == two["system"][1:] and one["tools"] == two["tools"]
    usage = entry["usage"]
    print(f"Claude Code {NEWEST} --bare, second session: {usage}")
    # All but the question and the turn's end: a few dozen tokens.
    assert usage["cached_tokens"] >= usage["prompt_tokens"] - 32, usage


def test_the_oldest_claude_code_runs_headless_and_its_whole_setup_fits_the_window(
    agent_node: ServerProcess, tmp_path: Path
) -> None:
    """2.1.197 with docs/agents.md's environment: its whole setup (captured from the CLI itself)
    fits the window with room for docs/agents.md's answers, counted exactly; a `--bare` run, whose
    prompt is small, is served to its end."""
    with capturing() as capture:
        done = claude(OLDEST, f"http://127.0.0.1:{capture.server_port}", tmp_path, "-p", "Hi")
        assert done.returncode == 0, done.stdout + done.stderr
    [whole, *_] = [body for path, body in capture.captured if "count_tokens" not in path]
    cap = int(readme.node_flag("max-output-tokens"))
    with httpx.Client(base_url=agent_node.origin, timeout=120) as client:
        window = client.get("/v1/infer/models").json()["data"][0]["context_length"]
        tokens = count(client, whole)
    assert tokens > OLD_WINDOW and tokens + cap <= window, tokens
    print(f"Claude Code {OLDEST}, its whole setup: {tokens} prompt tokens")
    route = "/v1/infer/v1/messages"
    before = set(served(agent_node, route))
    done = claude(
        OLDEST,
        agent_node.base_url,
        tmp_path,
        "--bare", "-p", "Say hi.",
        "--system-prompt", "Reply with one word.",
        "--tools", "Bash",
    )  # fmt: skip
    output = done.stdout + done.stderr
    new = [rid for rid in served(agent_node, route) if rid not in before]
    assert new, (output, agent_node.log_tail())
    with httpx.Client(base_url=agent_node.origin, timeout=30) as client:
        entries = [client.get(f"/v1/requests/{rid}").json() for rid in new]
    assert all(entry["status"] == "succeeded" for entry in entries), entries
    assert done.returncode == 0 or CUT.search(output), output


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
    agent_node: ServerProcess,
) -> None:
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


@pytest.mark.remote_only  # beside a node without the profile: the shard's SGLang server's
def test_safeguards_are_accepted_with_the_profile_and_refused_without(
    agent_node: ServerProcess, server: ServerProcess, model: str
) -> None:
    body = {"model": model, "max_tokens": 4, "messages": ASK, "safeguards": {"mode": "on"}}
    with httpx.Client(timeout=120) as client:
        assert client.post(f"{agent_node.base_url}/v1/messages", json=body).status_code == 200
        refused = client.post(f"{server.base_url}/v1/messages", json=body)
    assert refused.status_code == 400
    assert refused.json()["b3os"] == {"code": "unsupported_parameter", "param": "safeguards"}

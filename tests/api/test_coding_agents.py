"""The real Codex CLI and opencode (npm, tests/node) against the agents' node (docs/agents.md's node
command, on the embedded model's twin: its tokenizer, template and 32,768-token window;
tests/api/conftest.py), each configured exactly as docs/agents.md says (its config blocks are read
from docs/agents.md): a headless run with the agent's own default tools ends with its final answer
and exit 0 (or, where the answer runs to the node's --max-output-tokens, as the twin's random ones
do, with the cut answer reported as the agent reports its own maximum),
and every request it made was served in full; the session's next turn reads all of the last
one's prompt from the prefix cache. Each run goes through a recording proxy, so the
prompts each agent really sends are kept as the node served them; a Codex prompt past the window
meets exactly the context error, which Codex reads as such."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent_clis import codex, opencode
from tests.api import readme
from tests.api.conftest import AGENT_MAX_OUTPUT_TOKENS, served
from tests.capture import recording
from tests.server_process import ServerProcess

pytestmark = [pytest.mark.remote_only, pytest.mark.usefixtures("with_the_remote_engines_tests")]

TOO_LONG = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
OLD_WINDOW = 8192  # the embedded model's own, which these prompts were refused past
CODEX_OUT_OF_ROOM = "Codex ran out of room in the model's context window."
CODEX_INCOMPLETE = "Incomplete response returned, reason: max_output_tokens"
ASK = "Say hello."
NEXT_ASK = "Now say it in French."
PAGE = 4  # tokens the runtime may leave uncached at the end of a kept prefix


def requests_served(
    node: ServerProcess, route: str, before: set[str], captured: list[tuple[str, Any]]
) -> list[dict[str, Any]]:
    """Every request the agent made, as the node's request log has it: each succeeded, one per
    body it sent."""
    new = [rid for rid in served(node, route) if rid not in before]
    with httpx.Client(base_url=node.origin, timeout=30) as client:
        entries = [client.get(f"/v1/requests/{rid}").json() for rid in new]
    assert entries and all(entry["status"] == "succeeded" for entry in entries), entries
    assert len(entries) == len(captured), (entries, [path for path, _ in captured])
    return entries


def next_turn(
    node: ServerProcess, route: str, run: Callable[[str], subprocess.CompletedProcess[str]]
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """The agent run again (`run` takes its base URL) through a recording proxy: its exit, and
    the request log's entry of each request it made."""
    before = set(served(node, route))
    with recording(node.origin) as proxy:
        done = run(f"http://127.0.0.1:{proxy.server_port}/v1/infer")
    return done, requests_served(node, route, before, proxy.captured)


def assert_reads_the_last_turn_from_the_cache(last: dict[str, Any], first: dict[str, Any]) -> None:
    """A session's next turn resends the conversation and adds to it: its first request reads
    all of the last turn's prompt from the cache (and what was generated after it, which the
    runtime keeps too), so that only the answer and the new ask are computed."""
    usage = first["usage"]
    assert usage["cached_tokens"] >= last["usage"]["prompt_tokens"] - PAGE, (last, first)
    assert usage["prompt_tokens"] > last["usage"]["prompt_tokens"], (last, first)


def test_codex_exec_with_its_default_tools_runs_to_its_final_answer(
    agent_node: ServerProcess, tmp_path: Path
) -> None:
    route = "/v1/infer/responses"
    before = set(served(agent_node, route))
    with recording(agent_node.origin) as proxy:
        url = f"http://127.0.0.1:{proxy.server_port}/v1/infer"
        done = codex(url, tmp_path / "home", tmp_path / "work", ASK)
    output = done.stdout + done.stderr
    entries = requests_served(agent_node, route, before, proxy.captured)
    for (path, body), entry in zip(proxy.captured, entries, strict=True):
        assert path == route
        kinds = [tool["type"] for tool in body["tools"]]
        assert "web_search" in kinds and "client_metadata" in body  # left out, ignored
        assert "namespace" in kinds  # its sub-agents' tools: its default setup, not a shrunk one
        assert entry["usage"]["completion_tokens"] <= AGENT_MAX_OUTPUT_TOKENS, entry
    assert entries[0]["usage"]["prompt_tokens"] > OLD_WINDOW, entries[0]
    print(f"Codex: {[entry['usage'] for entry in entries]}")
    if done.returncode == 0:
        assert "ERROR" not in output and done.stdout.strip(), output  # its final answer
    else:
        # The twin's random answers (and the 135M model's, now and then) run on. Codex names no
        # maximum: the node ends that answer at its --max-output-tokens,
        # `incomplete` for max_output_tokens, and Codex, having streamed it, says so and exits
        # 1, as it does with OpenAI: that path, and that the answer ran that far.
        assert CODEX_INCOMPLETE in output, output
        assert entries[-1]["usage"]["completion_tokens"] == AGENT_MAX_OUTPUT_TOKENS, entries[-1]
    # The session's next turn (`codex exec resume --last`).
    home, work = tmp_path / "home", tmp_path / "work"
    _, resumed = next_turn(
        agent_node, route, lambda url: codex(url, home, work, NEXT_ASK, resume=True)
    )
    print(f"Codex, its next turn: {[entry['usage'] for entry in resumed]}")
    assert_reads_the_last_turn_from_the_cache(entries[-1], resumed[0])


def test_a_codex_prompt_past_the_window_meets_the_context_error(
    agent_node: ServerProcess, tmp_path: Path
) -> None:
    """Piped input that takes the first request past the window: the node's refusal is the one
    agents compact on, with the prompt's count, and Codex reads it as such (refused before the
    model runs: no prefill)."""
    notes = " ".join(f"note {i} is kept;" for i in range(9000))  # about 45,000 tokens
    with recording(agent_node.origin) as proxy:
        url = f"http://127.0.0.1:{proxy.server_port}/v1/infer"
        done = codex(url, tmp_path / "home", tmp_path / "work", ASK, stdin=notes)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert CODEX_OUT_OF_ROOM in output, output  # Codex read the refusal as the context error
    [(_, body), *_] = proxy.captured
    with httpx.Client(base_url=agent_node.origin, timeout=60) as client:
        refused = client.post("/v1/infer/responses", json=body)  # what it was answered
        window = client.get("/v1/infer/models").json()["data"][0]["context_length"]
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded"
    stated = TOO_LONG.fullmatch(error["message"])
    assert stated is not None and int(stated.group(1)) > window, error


def test_opencode_run_runs_to_its_final_answer(agent_node: ServerProcess, tmp_path: Path) -> None:
    route = "/v1/infer/chat/completions"
    before = set(served(agent_node, route))
    with recording(agent_node.origin) as proxy:
        url = f"http://127.0.0.1:{proxy.server_port}/v1/infer"
        done = opencode(url, tmp_path / "home", tmp_path / "work", ASK)
    assert done.returncode == 0, done.stdout + done.stderr
    entries = requests_served(agent_node, route, before, proxy.captured)
    # The title request and the turn go out side by side: either may reach the node first.
    titles = [body for _, body in proxy.captured if "tools" not in body]
    turns = [body for _, body in proxy.captured if "tools" in body]
    assert len(titles) == 1 and turns, proxy.captured
    assert all(len(turn["tools"]) >= 8 for turn in turns), proxy.captured
    limit = readme.opencode_limit(readme.opencode_config(url))
    with httpx.Client(base_url=agent_node.origin, timeout=30) as client:
        [card] = client.get("/v1/infer/models").json()["data"]
    assert limit["context"] == card["context_length"]  # docs/agents.md gives opencode the window
    for (_, body), entry in zip(proxy.captured, entries, strict=True):
        assert body["max_tokens"] == limit["output"]  # opencode asks its limit, the node caps it
        assert entry["usage"]["prompt_tokens"] + limit["output"] <= limit["context"], entry
        assert entry["usage"]["completion_tokens"] <= AGENT_MAX_OUTPUT_TOKENS, entry
    print(f"opencode: {[entry['usage'] for entry in entries]}")
    # The session's next turn (`opencode run --continue`): no title request this time.
    home, work = tmp_path / "home", tmp_path / "work"
    done, resumed = next_turn(
        agent_node, route, lambda url: opencode(url, home, work, NEXT_ASK, resume=True)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    print(f"opencode, its next turn: {[entry['usage'] for entry in resumed]}")
    turn = [e for (_, body), e in zip(proxy.captured, entries, strict=True) if "tools" in body]
    assert_reads_the_last_turn_from_the_cache(turn[-1], resumed[0])

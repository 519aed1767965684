"""The real Codex CLI and opencode (npm, tests/node) against the node, each configured exactly as
the README says (its config blocks are read from README.md), on the embedded model: a headless
run ends with its final answer and exit 0 (or, for Codex, with the node's `incomplete` answer
reported as OpenAI's when the tiny model repeats itself to the node's `--default-max-tokens`),
and every request it made was served in full. Each
run goes through a recording proxy, so the full prompts each agent really sends are kept as the
node served them (their size checked against the window); Codex with its own defaults, past the
model's window, meets exactly the context error, with the prompt's count."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import AGENT_DEFAULT_MAX_TOKENS, served
from tests.capture import recording
from tests.conftest import repo_root
from tests.server_process import ServerProcess

pytestmark = pytest.mark.remote_only  # the agents' node, on the session's SGLang server

README_URL = "http://127.0.0.1:7700/v1/infer"
TOO_LONG = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
WINDOW = 8192
CODEX_OUT_OF_ROOM = "Codex ran out of room in the model's context window."
CODEX_INCOMPLETE = "Incomplete response returned, reason: max_output_tokens"
ASK = "Say hello."
OPENCODE_MODEL = "b3os/smollm2-135m-instruct"  # its key in the README's opencode.json
# The embedded model loops to opencode's `limit.output` (256 in the README): at about 0.4 s a
# token after a 7,500-token prompt on the last stop's machine, 100 s of the suite spent decoding
# what is not tested. What is tested (the turn served in full and read by opencode to its exit)
# holds at any length; the README's limit is what leaves the prompt its room in the window.
OPENCODE_OUTPUT = 24


def readme_block(heading: str, language: str) -> str:
    """The first ```language block of the README's section under `heading`."""
    text = (repo_root() / "README.md").read_text()
    section = text[text.index(f"\n{heading}\n") :]
    match = re.search(rf"```{language}\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"README: no {language} block under {heading}"
    return match.group(1)


def readme_limits() -> tuple[int, int]:
    """The answers' lengths the README gives the agents: the node's --default-max-tokens in its
    Codex section, and opencode's limit.output."""
    command = readme_block("### Codex CLI", "sh")
    match = re.search(r"--default-max-tokens (\d+)", command)
    assert match is not None, command
    opencode = json.loads(readme_block("### opencode", "json"))
    model = opencode["provider"]["b3os"]["models"][OPENCODE_MODEL]
    return int(match.group(1)), int(model["limit"]["output"])


def codex(base_url: str, home: Path, cwd: Path, toml: str) -> subprocess.CompletedProcess[str]:
    """`codex exec` with the README's config.toml, pointed at base_url."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(toml.replace(README_URL, base_url))
    cwd.mkdir(parents=True, exist_ok=True)
    binary = repo_root() / "tests/node/node_modules/.bin/codex"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home),
           "B3OS_API_KEY": "x"}  # fmt: skip
    return subprocess.run(
        [str(binary), "exec", "--skip-git-repo-check", ASK],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def opencode(base_url: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # (opencode installs its provider package from npm into `home` on its first run)
    """`opencode run` with the README's opencode.json, pointed at base_url, its answers' length
    (`limit.output`) cut to OPENCODE_OUTPUT."""
    config = json.loads(readme_block("### opencode", "json").replace(README_URL, base_url))
    config["provider"]["b3os"]["models"][OPENCODE_MODEL]["limit"]["output"] = OPENCODE_OUTPUT
    cwd.mkdir(parents=True, exist_ok=True)
    binary = repo_root() / "tests/node/node_modules/opencode-linux-x64/bin/opencode"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "B3OS_API_KEY": "x",
           "OPENCODE_CONFIG_CONTENT": json.dumps(config), "OPENCODE_DISABLE_AUTOUPDATE": "1",
           "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}  # fmt: skip
    return subprocess.run(
        [str(binary), "run", ASK],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


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


def test_codex_exec_runs_to_its_final_answer(
    agent_node: ServerProcess, tmp_path: Path, engine: str
) -> None:
    del engine  # run with the remote variant of the suite
    route = "/v1/infer/responses"
    before = set(served(agent_node, route))
    toml = readme_block("### Codex CLI", "toml")
    with recording(agent_node.origin) as proxy:
        url = f"http://127.0.0.1:{proxy.server_port}/v1/infer"
        done = codex(url, tmp_path / "home", tmp_path / "work", toml)
    output = done.stdout + done.stderr
    entries = requests_served(agent_node, route, before, proxy.captured)
    for (path, body), entry in zip(proxy.captured, entries, strict=True):
        assert path == route
        kinds = [tool["type"] for tool in body["tools"]]
        assert "web_search" in kinds and "client_metadata" in body  # left out, ignored
        assert entry["usage"]["prompt_tokens"] + readme_limits()[0] <= WINDOW, entry
        assert entry["usage"]["completion_tokens"] <= AGENT_DEFAULT_MAX_TOKENS, entry
    print(f"Codex: {[entry['usage'] for entry in entries]}")
    if done.returncode == 0:
        assert "ERROR" not in output and done.stdout.strip(), output  # its final answer
        return
    # Sampled at the model's own temperature (0.2), the 135M model now and then repeats itself
    # (seen in about one run in four). Codex names no maximum: the node ends that answer at its
    # --default-max-tokens, `incomplete` for max_output_tokens, and Codex, having streamed it,
    # says so and exits 1, as it does with OpenAI: that path, and that the answer ran that far.
    assert CODEX_INCOMPLETE in output, output
    assert entries[-1]["usage"]["completion_tokens"] == AGENT_DEFAULT_MAX_TOKENS, entries[-1]


def test_codex_with_its_defaults_meets_the_context_error(
    agent_node: ServerProcess, tmp_path: Path, engine: str
) -> None:
    """Its sub-agent namespace and goal tools take its first request past the window: the
    node's refusal is the one agents compact on, with the prompt's count."""
    del engine
    toml = readme_block("### Codex CLI", "toml")
    defaults = toml[: toml.index("[agents]")]
    with recording(agent_node.origin) as proxy:
        url = f"http://127.0.0.1:{proxy.server_port}/v1/infer"
        done = codex(url, tmp_path / "home", tmp_path / "work", defaults)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    [(_, body), *_] = proxy.captured
    assert "namespace" in [tool["type"] for tool in body["tools"]]
    assert CODEX_OUT_OF_ROOM in output, output  # Codex read the refusal as the context error
    with httpx.Client(base_url=agent_node.origin, timeout=60) as client:
        refused = client.post("/v1/infer/responses", json=body)  # what it was answered
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded"
    stated = TOO_LONG.fullmatch(error["message"])
    assert stated is not None and int(stated.group(1)) > WINDOW, error
    print(f"Codex with its defaults: {stated.group(1)} prompt tokens")


def test_opencode_run_runs_to_its_final_answer(
    agent_node: ServerProcess, tmp_path: Path, engine: str
) -> None:
    del engine
    route = "/v1/infer/chat/completions"
    before = set(served(agent_node, route))
    with recording(agent_node.origin) as proxy:
        url = f"http://127.0.0.1:{proxy.server_port}/v1/infer"
        done = opencode(url, tmp_path / "home", tmp_path / "work")
    assert done.returncode == 0, done.stdout + done.stderr
    entries = requests_served(agent_node, route, before, proxy.captured)
    title, turn = proxy.captured[0][1], proxy.captured[-1][1]
    assert "tools" not in title and len(turn["tools"]) >= 8, proxy.captured
    for (_, body), entry in zip(proxy.captured, entries, strict=True):
        assert entry["usage"]["prompt_tokens"] + readme_limits()[1] <= WINDOW, entry
        assert entry["usage"]["completion_tokens"] <= body["max_tokens"] <= OPENCODE_OUTPUT
    print(f"opencode: {[entry['usage'] for entry in entries]}")

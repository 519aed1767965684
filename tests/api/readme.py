"""What the docs tell users to run with the agents (docs/agents.md), read from them, so that the
tests run the docs' own configuration: the agents' node command, Claude Code's environment,
Codex's config.toml and opencode's opencode.json."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.conftest import repo_root

README_URL = "http://127.0.0.1:7700/v1/infer"  # the base URL the docs' configurations name
OPENCODE_MODEL = "b3os/smollm2-135m-instruct"  # its key in the docs' opencode.json
AGENTS = "docs/agents.md"


def block(heading: str, language: str) -> str:
    """The first ```language block of docs/agents.md's section under `heading`."""
    text = "\n" + (repo_root() / AGENTS).read_text()
    section = text[text.index(f"\n{heading}\n") :]
    match = re.search(rf"```{language}\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"{AGENTS}: no {language} block under {heading}"
    return match.group(1)


def node_flag(name: str) -> str:
    """A flag's value in the docs' command for the agents' node."""
    match = re.search(rf"--{name} (\S+)", block("# Coding agents", "sh"))
    assert match is not None, f"{AGENTS}: the agents' node has no --{name}"
    return match.group(1).rstrip('"')


def claude_code_environment(base_url: str) -> dict[str, str]:
    """The variables docs/agents.md's Claude Code section exports, pointed at base_url."""
    found = {}
    for line in block("## Claude Code", "sh").splitlines():
        if line.startswith("export "):
            for assignment in line.split("#")[0].split()[1:]:
                name, value = assignment.split("=", 1)
                found[name] = value.replace(README_URL, base_url)
    assert "ANTHROPIC_BASE_URL" in found, found
    return found


def codex_config(base_url: str) -> str:
    return block("## Codex CLI", "toml").replace(README_URL, base_url)


def opencode_config(base_url: str) -> dict[str, Any]:
    return dict(json.loads(block("## opencode", "json").replace(README_URL, base_url)))


def opencode_limit(config: dict[str, Any]) -> dict[str, int]:
    return dict(config["provider"]["b3os"]["models"][OPENCODE_MODEL]["limit"])

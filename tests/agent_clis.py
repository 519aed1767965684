"""The coding agents' CLIs (npm, tests/node) run headless with docs/agents.md's configuration
(tests/api/readme.py), each in a home of its own: one turn, or the next turn of the session
last run in that home. The tests and `python -m bench session` run them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.api import readme
from tests.conftest import repo_root

TIMEOUT_S = 900


def claude(version: str, base_url: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Claude Code headless, with docs/agents.md's environment, in a home of its own (`-c` goes on
    with the last session)."""
    binary = repo_root() / f"tests/node/node_modules/claude-code-{version}/bin/claude.exe"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd / "home"),
        **readme.claude_code_environment(base_url),
        "DISABLE_AUTOUPDATER": "1",  # the tests' own: no update check on a closed network
    }
    return subprocess.run(
        [str(binary), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def codex(
    base_url: str, home: Path, cwd: Path, ask: str, stdin: str = "", *, resume: bool = False
) -> subprocess.CompletedProcess[str]:
    """`codex exec` with docs/agents.md's config.toml, pointed at base_url (`resume`: the next turn
    of the last session); `stdin` is appended to the ask, as Codex does with piped input."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(readme.codex_config(base_url))
    cwd.mkdir(parents=True, exist_ok=True)
    binary = repo_root() / "tests/node/node_modules/.bin/codex"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home),
           "B3OS_API_KEY": "x"}  # fmt: skip
    turn = ["resume", "--last", ask] if resume else [ask]
    return subprocess.run(
        [str(binary), "exec", "--skip-git-repo-check", *turn],
        cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip


def opencode(
    base_url: str, home: Path, cwd: Path, ask: str, *, resume: bool = False
) -> subprocess.CompletedProcess[str]:
    # (opencode installs its provider package from npm into `home` on its first run)
    """`opencode run` with docs/agents.md's opencode.json, pointed at base_url (`resume`: the next
    turn of the last session)."""
    cwd.mkdir(parents=True, exist_ok=True)
    binary = repo_root() / "tests/node/node_modules/opencode-linux-x64/bin/opencode"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "B3OS_API_KEY": "x",
           "OPENCODE_CONFIG_CONTENT": json.dumps(readme.opencode_config(base_url)),
           "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}  # fmt: skip
    turn = ["--continue", ask] if resume else [ask]
    return subprocess.run(
        [str(binary), "run", *turn],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip

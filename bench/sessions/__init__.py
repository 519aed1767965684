"""Agent sessions: the coding agents' CLIs (tests/node) run for three turns of one session against
a node, each request they send kept by the tests' recording proxy (tests/capture.py), and the
recorded sessions kept here as fixtures (`<agent>.json.gz`) for `python -m bench session` to
replay as sent.

    python -m bench.sessions record [AGENT ...]  # starts the docs' agents' node, records
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent
AGENTS = ("claude-code", "codex", "opencode")
# Three turns of one session: each sends the whole conversation again and adds a little.
ASKS = ("Say hello.", "Now say it in French.", "And in German, in one word.")
CLAUDE_CODE = "2.1.332"  # tests/node/package.json
PROTOCOLS = {"/v1/messages": "messages", "/chat/completions": "chat", "/responses": "responses"}


@dataclass(frozen=True)
class Request:
    turn: int  # 1-based: the CLI's invocation
    protocol: str  # messages, chat or responses
    body: dict[str, Any]


@dataclass(frozen=True)
class Session:
    agent: str
    version: str
    recorded: str  # the date
    requests: tuple[Request, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "version": self.version,
            "recorded": self.recorded,
            "requests": [vars(request) for request in self.requests],
        }


def load(agent: str) -> Session:
    with gzip.open(FOLDER / f"{agent}.json.gz", "rt") as fixture:
        data = json.load(fixture)
    requests = tuple(Request(**request) for request in data.pop("requests"))
    return Session(requests=requests, **data)


def protocol_of(path: str) -> str | None:
    """The protocol of a path the CLI posted to (count_tokens and the like: None); Claude Code
    adds `?beta=true`."""
    path = path.split("?", 1)[0]
    return next((name for end, name in PROTOCOLS.items() if path.endswith(end)), None)


def _turn(agent: str, base_url: str, work: Path, turn: int) -> Callable[[], Any]:
    from tests.agent_clis import claude, codex, opencode

    ask, resume = ASKS[turn - 1], turn > 1
    if agent == "claude-code":
        args = ("-c", "-p", ask) if resume else ("-p", ask)
        return lambda: claude(CLAUDE_CODE, base_url, work, *args)
    if agent == "codex":
        return lambda: codex(base_url, work / "home", work / "cwd", ask, resume=resume)
    return lambda: opencode(base_url, work / "home", work / "cwd", ask, resume=resume)


def version(agent: str) -> str:
    from tests.conftest import repo_root

    if agent == "claude-code":
        return CLAUDE_CODE
    package = {"codex": "@openai/codex", "opencode": "opencode-linux-x64"}[agent]
    manifest = repo_root() / "tests/node/node_modules" / package / "package.json"
    return str(json.loads(manifest.read_text())["version"])


@dataclass(frozen=True)
class Live:
    """A session run for real: what the CLI sent, the node's id for each request (its request
    log entry), and each turn's exit (`ok`, or the status and the output's end)."""

    session: Session
    request_ids: tuple[str | None, ...]
    exits: tuple[str, ...]


def run_live(agent: str, origin: str, work: Path) -> Live:
    """Three turns of the agent's session against the node at `origin`, through the recording
    proxy."""
    from tests.capture import recording

    requests: list[Request] = []
    ids: list[str | None] = []
    exits = []
    for turn in range(1, len(ASKS) + 1):
        with recording(origin) as proxy:
            done = _turn(agent, f"http://127.0.0.1:{proxy.server_port}/v1/infer", work, turn)()
        for index, (path, body) in enumerate(proxy.captured):
            protocol = protocol_of(path)
            if protocol is not None:
                requests.append(Request(turn, protocol, body))
                ids.append(proxy.request_ids.get(index))
        output = (done.stdout + done.stderr).strip()
        exits.append("ok" if done.returncode == 0 else f"exit {done.returncode}: {output[-200:]}")
    session = Session(agent, version(agent), time.strftime("%Y-%m-%d"), tuple(requests))
    return Live(session, tuple(ids), tuple(exits))


def record(origin: str, agents: list[str]) -> None:
    for agent in agents:
        with tempfile.TemporaryDirectory() as work:
            live = run_live(agent, origin, Path(work))
        path = FOLDER / f"{agent}.json.gz"
        with gzip.open(path, "wt") as fixture:
            json.dump(live.session.to_json(), fixture)
        count = len(live.session.requests)
        print(f"{agent} {live.session.version}: {count} requests, {live.exits} -> {path}")


def main(argv: list[str]) -> int:
    if argv[:1] != ["record"] or not set(argv[1:]) <= set(AGENTS):
        print(__doc__, file=sys.stderr)
        return 2
    from bench.target import started
    from tests.api import readme

    node = ["--compat", readme.node_flag("compat")]
    node += ["--max-output-tokens", readme.node_flag("max-output-tokens")]
    with tempfile.TemporaryDirectory() as logs:
        with started("node", Path(logs) / "node.log", *node) as target:
            record(target.origin, argv[1:] or list(AGENTS))
    return 0

"""Agent sessions: the recorded sessions of Claude Code, Codex and opencode (bench/sessions, three
turns each, every request as the CLI sent it) replayed in order, streamed, on this server (a node
with the docs' agents' flags: `--compat claude-code,codex`) and, with --compare-sglang, on
SGLang's own server on the same engine: per request, the prompt, the share of it read from the
prefix cache, the time to first token and the request's time. Then each CLI live, three turns of
a new session against the node, read from its request log (where tests/node has the CLIs).

Every answer is capped at the same few tokens on both servers (the recorded ones name up to
32,000, and SGLang's own server has no cap of its own): what a session's turns cost is their
prefill, which the cache decides."""

from __future__ import annotations

import asyncio
import copy
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from bench import sessions
from bench.client import client, stream
from bench.report import Row
from bench.run import Run
from bench.target import Target, paused, started

NAME = "agent sessions"
NOTE = (
    "Recorded sessions replayed as sent, streamed, each answer capped at the same tokens; "
    "cached: the prompt's tokens read from the prefix cache, as the server's usage says; "
    "live: the CLI run for three turns, from the node's request log."
)
ANSWER_TOKENS = {False: 32, True: 8}  # by --quick
# The docs' agents' node (docs/agents.md, its `# Coding agents` command).
AGENT_FLAGS = ("--compat", "claude-code,codex", "--max-output-tokens", "256")


def _capped(request: sessions.Request, model: str, tokens: int) -> dict[str, Any]:
    body = copy.deepcopy(request.body)
    body["model"] = model
    if request.protocol == "responses":
        body["max_output_tokens"] = tokens
    else:
        body["max_tokens"] = min(int(body.get("max_tokens") or tokens), tokens)
        body.pop("max_completion_tokens", None)
    if request.protocol == "chat":
        body["stream_options"] = {"include_usage": True}
    return body


def _row(agent: str, label: str, target: str, values: dict[str, Any]) -> Row:
    prompt, cached = values.get("prompt tokens"), values.get("cached tokens")
    if prompt and cached is not None:
        values["cached %"] = round(100 * cached / prompt, 1)
    return Row(NAME, f"{agent} {label} ({target})", values)


async def _replay(target: Target, session: sessions.Session, tokens: int) -> list[Row]:
    rows = []
    turns: dict[int, int] = {}
    async with client() as http:
        for request in session.requests:
            turns[request.turn] = turns.get(request.turn, 0) + 1
            label = f"t{request.turn}.{turns[request.turn]}"
            body = _capped(request, target.model, tokens)
            try:
                sample = await stream(http, target, request.protocol, body)
            except (RuntimeError, httpx.HTTPError) as error:  # refused, or the server failed
                said = str(error) or type(error).__name__
                rows.append(_row(session.agent, label, target.name, {"error": said[:80]}))
                continue
            values = {
                "prompt tokens": sample.prompt_tokens,
                "cached tokens": sample.cached_tokens,
                "TTFT ms": round(sample.ttft_ms, 1),
                "request ms": round(sample.e2e_ms, 1),
            }
            rows.append(_row(session.agent, label, target.name, values))
    return rows


def _live(target: Target, agent: str) -> list[Row]:
    with tempfile.TemporaryDirectory() as work:
        live = sessions.run_live(agent, target.origin, Path(work))
    rows = []
    turns: dict[int, int] = {}
    with httpx.Client(base_url=target.origin, timeout=60) as http:
        for request, request_id in zip(live.session.requests, live.request_ids, strict=True):
            turns[request.turn] = turns.get(request.turn, 0) + 1
            label = f"live t{request.turn}.{turns[request.turn]}"
            if request_id is None:
                rows.append(_row(agent, label, target.name, {"error": "no answer"}))
                continue
            entry = http.get(f"/v1/requests/{request_id}").json()
            usage, timing = entry["usage"], entry["timing"]
            values = {
                "prompt tokens": usage["prompt_tokens"],
                "cached tokens": usage["cached_tokens"],
                "TTFT ms": timing.get("ttft"),
                "request ms": entry["duration_ms"],
            }
            rows.append(_row(agent, label, target.name, values))
    exits = [exit_ for exit_ in live.exits if exit_ != "ok"]
    if exits:
        rows.append(Row(NAME, f"{agent} live exits ({target.name})", {"error": exits[0][:80]}))
    return rows


def _has_clis() -> bool:
    from tests.conftest import repo_root

    return (repo_root() / "tests/node/node_modules/.bin/codex").exists()


def run(run: Run) -> list[Row]:
    tokens = ANSWER_TOKENS[run.config.quick]
    recorded = [sessions.load(agent) for agent in sessions.AGENTS]
    rows: list[Row] = []
    with ExitStack() as stack:
        ours = run.ours
        if run.local:  # a node of its own, with the agents' flags
            log = run.folder / "agents-node.log"
            args = (*AGENT_FLAGS, *run.server_args)
            ours = stack.enter_context(started("this server", log, *args))
        targets = [ours] + ([run.compare] if run.compare else [])
        idle = [run.ours] if ours is not run.ours else []
        for target in targets:
            with paused([t for t in [*idle, *targets] if t is not target]):
                for session in recorded:
                    rows += asyncio.run(_replay(target, session, tokens))
        if _has_clis() and not run.config.quick:
            with paused([t for t in [*idle, *targets] if t is not ours]):
                for agent in sessions.AGENTS:
                    rows += _live(ours, agent)
    return rows

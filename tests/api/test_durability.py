"""Metering and the request log survive SIGKILL, through a real server on the replay engine (no
model: 256 pieces, one token each; `--replay-hold-after N` holds a stream after N of them, so a
kill lands at an exact point). Killed before the first byte, at the first event, mid-stream, at
the last event and after the end: restarted on the same store, the request's metering record
holds at least what its client received (`interrupted`, or settled when the answer had ended),
and `GET /v1/requests/{id}` still answers."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.engines.replay import ANSWER_PIECES, PIECES
from server.node.metering import RESERVE_TOKENS
from tests.api.sse import events
from tests.conftest import AGENTS_AND_FAMILIES
from tests.server_process import ServerProcess

pytestmark = pytest.mark.shard(AGENTS_AND_FAMILIES)  # its nodes are its own: the shard with room

MODEL = "b3os/smollm2-135m-instruct"
BODY = {
    "model": MODEL,
    "max_tokens": ANSWER_PIECES,
    "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [{"role": "user", "content": "Tell me about the lighthouse."}],
}
# (kill point, pieces the stream is held after, tokens its client holds when it is killed)
KILL_POINTS = [
    ("before the first byte", 0, 0),
    ("at the first event", 1, 1),
    ("mid-stream", ANSWER_PIECES // 2, ANSWER_PIECES // 2),
    ("at the last event", ANSWER_PIECES - 1, ANSWER_PIECES - 1),  # the next carries the finish
    ("after the end", None, ANSWER_PIECES),
]


def create_key(db: Path, org: str) -> str:
    created = subprocess.run(
        [
            sys.executable,
            "-m",
            "server",
            "keys",
            "create",
            "--org",
            org,
            "--project",
            "p1",
            "--scopes",
            "infer:run,infer:read",
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return created.stdout.strip()


def key_id(key: str) -> str:
    return "key_" + key[len("b3os_sk_") :][:8]


@dataclass
class Killed:
    """One request at one kill point, and what the store and the log held of it."""

    received: int  # content tokens its client held when the server was killed
    request_id: str = ""
    at_kill: dict[str, Any] = field(default_factory=dict)  # its metering record, read then
    after: dict[str, Any] = field(default_factory=dict)  # ... after the restart
    entry: dict[str, Any] = field(default_factory=dict)  # GET /v1/requests/{id} after it
    other_org: int = 0  # the status GET /v1/requests/{id} answered another organization
    usage: dict[str, Any] = field(default_factory=dict)  # the usage its client was given


@dataclass
class Node:
    folder: Path
    db: Path
    key: str
    other: str
    starts: int = 0

    def server(self, hold_after: int | None) -> ServerProcess:
        self.starts += 1
        hold = [] if hold_after is None else ["--replay-hold-after", str(hold_after)]
        log = self.folder / f"server-{self.starts}.log"
        return ServerProcess(log, "--engine", "replay", "--db", str(self.db), *hold)

    def usage(self) -> dict[str, dict[str, Any]]:
        """The metering records, read from the store as another process would."""
        with sqlite3.connect(self.db) as db:
            db.row_factory = sqlite3.Row
            return {row["request_id"]: dict(row) for row in db.execute("SELECT * FROM usage")}


def held_before_the_head(node: Node, process: ServerProcess, killed: Killed) -> None:
    """The stream is held before its first token, so its head never comes: the request is
    found by its metering record, written when it was admitted."""
    known = set(node.usage())

    def post() -> None:
        headers = {"Authorization": f"Bearer {node.key}"}
        with httpx.Client(base_url=process.origin, headers=headers, timeout=60) as client:
            with contextlib.suppress(httpx.TransportError):  # killed while the head waits
                client.post("/v1/infer/chat/completions", json=BODY)

    waiting = threading.Thread(target=post)
    waiting.start()
    deadline = time.monotonic() + 30
    while not (new := set(node.usage()) - known):
        assert time.monotonic() < deadline, "no metering record for the admitted request"
        time.sleep(0.01)
    killed.request_id = new.pop()
    killed.at_kill = node.usage()[killed.request_id]
    process.kill()
    waiting.join(timeout=30)


def read_then_kill(node: Node, process: ServerProcess, killed: Killed) -> None:
    """Reads the stream until its client holds `killed.received` tokens (all of it and its end
    for the last point), then kills the server."""
    headers = {"Authorization": f"Bearer {node.key}"}
    text = ""
    with (
        httpx.Client(base_url=process.origin, headers=headers, timeout=60) as client,
        client.stream("POST", "/v1/infer/chat/completions", json=BODY) as stream,
    ):
        assert stream.status_code == 200
        killed.request_id = stream.headers["x-request-id"]
        reader = events(stream)  # read by hand: leaving a loop over it would close it
        pieces = 0
        while pieces < killed.received:
            _, data = next(reader)
            content = data["choices"][0]["delta"].get("content") if data["choices"] else None
            if content:
                text += content
                pieces += 1
        if killed.received == ANSWER_PIECES:
            for _, data in reader:
                if data == "[DONE]":
                    break
                if data.get("usage"):
                    killed.usage = data["usage"]
        killed.at_kill = node.usage()[killed.request_id]
        process.kill()
    assert text == "".join(PIECES[i % len(PIECES)] for i in range(killed.received))


def looked_up(node: Node, process: ServerProcess, killed: Killed) -> None:
    """After the restart: the record and the log entry of the request killed before."""
    killed.after = node.usage()[killed.request_id]
    path = f"/v1/requests/{killed.request_id}"
    for key, own in ((node.key, True), (node.other, False)):
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=process.origin, headers=headers, timeout=60) as client:
            response = client.get(path)
        if own:
            assert response.status_code == 200, response.text
            killed.entry = response.json()
        else:
            killed.other_org = response.status_code


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Killed]:
    """Each kill point in turn on one store: a server held there, a request, SIGKILL; the next
    server (held at the next point) finds what the killed one left."""
    folder = tmp_path_factory.mktemp("durability")
    db = folder / "node.db"
    node = Node(folder, db, create_key(db, "acme"), create_key(db, "other"))
    outcomes: dict[str, Killed] = {}
    previous: Killed | None = None
    for name, hold_after, received in [*KILL_POINTS, ("", None, 0)]:
        process = node.server(hold_after)
        process.start()
        try:
            process.wait_ready()
            if previous is not None:
                looked_up(node, process, previous)
            if not name:
                break
            outcome = outcomes[name] = Killed(received)
            if received == 0:
                held_before_the_head(node, process, outcome)
            else:
                read_then_kill(node, process, outcome)
            previous = outcome
        finally:
            process.stop()
    for name, outcome in outcomes.items():
        at_kill, after = outcome.at_kill, outcome.after
        print(
            f"\n{name:>22}: client {outcome.received:3d} tokens; record at kill "
            f"{at_kill['status']} in {at_kill['input_tokens']} out {at_kill['output_tokens']}; "
            f"after restart {after['status']} in {after['input_tokens']} "
            f"out {after['output_tokens']}; log entry {outcome.entry['status']}"
        )
    return outcomes


@pytest.mark.parametrize(("point", "hold_after", "received"), KILL_POINTS[:-1])
def test_a_request_killed_midway_is_billed_at_least_what_its_client_received(
    killed: dict[str, Killed], point: str, hold_after: int, received: int
) -> None:
    del hold_after
    outcome = killed[point]
    assert outcome.at_kill["status"] == "running"
    assert outcome.after["status"] == "interrupted"
    # Written ahead: never less than the client held, at most one reservation more.
    output = outcome.after["output_tokens"]
    assert received <= output <= min(received + RESERVE_TOKENS, ANSWER_PIECES)
    assert outcome.after["output_tokens"] == outcome.at_kill["output_tokens"]
    ended = killed["after the end"]
    assert outcome.after["input_tokens"] == ended.usage["prompt_tokens"] > 0


def test_a_request_killed_after_its_end_is_settled_with_what_its_client_was_given(
    killed: dict[str, Killed],
) -> None:
    outcome = killed["after the end"]
    # Settled before the finish reached the client: already so when the server was killed.
    assert outcome.at_kill["status"] == outcome.after["status"] == "succeeded"
    given = (outcome.usage["prompt_tokens"], outcome.usage["completion_tokens"])
    assert (outcome.after["input_tokens"], outcome.after["output_tokens"]) == given
    assert given[1] == ANSWER_PIECES


@pytest.mark.parametrize(("point", "hold_after", "received"), KILL_POINTS)
def test_the_request_log_answers_after_the_restart(
    killed: dict[str, Killed], point: str, hold_after: int | None, received: int
) -> None:
    del hold_after, received
    outcome = killed[point]
    entry = outcome.entry
    assert entry["id"] == outcome.request_id
    assert entry["object"] == "infer.request"
    assert entry["route"] == "chat.completions"
    assert entry["stream"] is True
    assert entry["usage"]["prompt_tokens"] == outcome.after["input_tokens"]
    if point == "after the end":
        assert entry["status"] == "succeeded"
        assert entry["finish_reason"] == "max_tokens"
        assert entry["usage"]["completion_tokens"] == ANSWER_PIECES
    else:
        assert entry["status"] == "interrupted"
    assert outcome.other_org == 404  # only its own organization may read it

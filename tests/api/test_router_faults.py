"""Faults through the router topology (tests/topology.py), with real processes SIGKILLed: a
worker under a steady trickle of requests, then the router itself. Streams in flight end with
their protocol's error event; new requests get 503 with Retry-After, never a 500; traffic moves
to the live worker; a restarted worker rejoins and serves (alone, once the other is taken out
of the router through its API); a restarted router is used again.
Each test leaves the topology as it found it: every process up, the router holding each worker
healthy. The figures are printed (`pytest -s`) for the record, not asserted."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.api.conventions import wait_for
from tests.api.sse import events
from tests.server_process import ServerProcess
from tests.topology import RouterTopology, busy, put_back, take_out, wait_until_healthy

pytestmark = pytest.mark.router_only

# One prompt prefix for everything here: the cache-aware router sends it to one worker.
STORY = "Tell me a very long story about a dragon named Zorblax, who"
RESTART_S = 300.0  # a worker restarting on a loaded 2-core machine


@dataclass
class Outcome:
    at: float  # seconds after the fault
    status: int
    retry_after: str | None
    code: str | None


@dataclass
class Trickle:
    """Small requests, one every 0.2 s on alternating protocols, until stopped."""

    server: ServerProcess
    model: str
    since: float = field(default_factory=time.monotonic)
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.server.origin, timeout=60) as client:
            index = 0
            while not self._stop.wait(0.2):
                index += 1
                messages = [{"role": "user", "content": f"{STORY} ate {index} apples."}]
                body = {"model": self.model, "max_tokens": 4, "messages": messages}
                chat = index % 2 == 0
                path = "/v1/infer/chat/completions" if chat else "/v1/infer/v1/messages"
                response = client.post(path, json=body)
                code = None
                if response.status_code != 200:
                    error = response.json()
                    code = error["error"]["code"] if chat else error["b3os"]["code"]
                at = time.monotonic() - self.since
                retry = response.headers.get("retry-after")
                self.outcomes.append(Outcome(at, response.status_code, retry, code))

    def served_in_a_row(self, count: int) -> float | None:
        """When the last `count` requests, all served, began being so; None if not yet."""
        tail = self.outcomes[-count:]
        if len(tail) < count or any(o.status != 200 for o in tail):
            return None
        return tail[0].at

    def stop(self) -> None:
        self._stop.set()


@contextmanager
def trickling(server: ServerProcess, model: str) -> Iterator[Trickle]:
    trickle = Trickle(server, model)
    thread = threading.Thread(target=trickle.run, daemon=True)
    thread.start()
    try:
        yield trickle
    finally:
        trickle.stop()
        thread.join(timeout=120)


@dataclass
class LongStream:
    """A long greedy answer read in a thread, every event kept."""

    server: ServerProcess
    model: str
    protocol: str
    received: list[tuple[str | None, Any]] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self) -> LongStream:
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        wait_for(lambda: self.deltas() >= 3, timeout=120)
        return self

    def deltas(self) -> int:
        return sum(1 for name, data in self.received if _is_delta(name, data))

    def ended(self) -> list[tuple[str | None, Any]]:
        assert self.thread is not None
        self.thread.join(timeout=120)
        assert not self.thread.is_alive()
        return self.received

    def _read(self) -> None:
        messages = [{"role": "user", "content": f"{STORY} lived in a cave."}]
        body = {"model": self.model, "max_tokens": 2000, "temperature": 0, "stream": True}
        path = "/v1/infer/chat/completions" if self.protocol == "chat" else "/v1/infer/v1/messages"
        with httpx.Client(base_url=self.server.origin, timeout=120) as client:
            with client.stream("POST", path, json={**body, "messages": messages}) as response:
                assert response.status_code == 200
                self.received.extend(events(response))


def _is_delta(name: str | None, data: Any) -> bool:
    return name == "content_block_delta" or (isinstance(data, dict) and bool(data.get("choices")))


def assert_ended_with_the_error_event(stream: LongStream) -> None:
    received = stream.ended()
    name, data = received[-1]
    if stream.protocol == "messages":
        assert name == "error"
        assert data["error"]["type"] == "overloaded_error"
        assert data["b3os"]["code"] == "infer_backend_unavailable"
    else:
        assert data["error"]["code"] == "infer_backend_unavailable"
    ends = [data for _, data in received if data == "[DONE]" or _is_stop(data)]
    assert not ends  # the error event is the last, and no end of answer came before it


def _is_stop(data: Any) -> bool:
    return isinstance(data, dict) and data.get("type") == "message_stop"


def assert_refused_as_unavailable(outcomes: list[Outcome]) -> None:
    for outcome in outcomes:
        assert outcome.status in (200, 503), outcome  # never a 500
        if outcome.status == 503:
            assert outcome.code == "infer_backend_unavailable"
            assert outcome.retry_after is not None and int(outcome.retry_after) >= 1


def test_a_worker_killed_under_a_steady_trickle(
    server: ServerProcess, http: httpx.Client, router_topology: RouterTopology, model: str
) -> None:
    streams = [LongStream(server, model, protocol).start() for protocol in ("messages", "chat")]
    running = [worker for worker in router_topology.workers if busy(worker)]
    assert len(running) == 1  # the cache-aware router keeps one prefix on one worker
    victim = running[0]
    other = next(w for w in router_topology.workers if w is not victim)
    with trickling(server, model) as trickle:
        wait_for(lambda: trickle.served_in_a_row(3) is not None, timeout=60)
        trickle.since = killed = time.monotonic()
        trickle.outcomes.clear()
        victim.kill()
        for stream in streams:
            assert_ended_with_the_error_event(stream)
        moved = wait_for(lambda: trickle.served_in_a_row(10), timeout=120)
        assert http.get("/readyz").status_code == 200  # the other worker serves
    assert_refused_as_unavailable(trickle.outcomes)
    failed = [o for o in trickle.outcomes if o.status != 200]
    print(
        f"worker killed: {len(failed)} of {len(trickle.outcomes)} trickle requests refused "
        f"({[o.status for o in failed]}); traffic on the live worker {moved:.2f} s after"
    )

    victim.start()
    restarted = time.monotonic()
    victim.wait_for("/health_generate")
    wait_until_healthy(router_topology, time.monotonic() + RESTART_S)
    rejoined = time.monotonic() - restarted
    # It serves: with the other worker taken out of the router (its process left running, so
    # that nothing needs restarting after), only the restarted one can answer.
    take_out(router_topology, other)
    try:
        with trickling(server, model) as trickle:
            served = wait_for(lambda: trickle.served_in_a_row(5), timeout=120)
    finally:
        put_back(router_topology, other)
    assert_refused_as_unavailable(trickle.outcomes)
    print(
        f"restarted worker: healthy at the router {rejoined:.1f} s after its start "
        f"(process start included), serving alone {served:.2f} s after the other left; "
        f"whole fault {time.monotonic() - killed:.0f} s"
    )
    wait_until_healthy(router_topology)


def test_the_router_killed_and_restarted(
    server: ServerProcess, http: httpx.Client, router_topology: RouterTopology, model: str
) -> None:
    stream = LongStream(server, model, "messages").start()
    router_topology.router.kill()
    killed = time.monotonic()
    assert_ended_with_the_error_event(stream)
    wait_for(lambda: http.get("/readyz").status_code == 503, timeout=30)
    unready = time.monotonic() - killed
    hello = [{"role": "user", "content": "Hi"}]
    for path, chat in (("/v1/infer/v1/messages", False), ("/v1/infer/chat/completions", True)):
        refused = http.post(path, json={"model": model, "max_tokens": 4, "messages": hello})
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) >= 1
        body = refused.json()
        code = body["error"]["code"] if chat else body["b3os"]["code"]
        assert code == "infer_backend_unavailable"
    # Nothing is left running: the front aborts at the workers it reaches itself.
    wait_for(lambda: all(busy(worker) == 0 for worker in router_topology.workers), timeout=10)

    router_topology.router.start()
    restarted = time.monotonic()
    router_topology.router.wait_for("/readiness")
    wait_until_healthy(router_topology)
    wait_for(lambda: http.get("/readyz").status_code == 200, timeout=60)
    ready = time.monotonic() - restarted
    answer = http.post(
        "/v1/infer/v1/messages", json={"model": model, "max_tokens": 4, "messages": hello}
    )
    assert answer.status_code == 200
    print(
        f"router killed: front unready after {unready:.2f} s; ready {ready:.2f} s after the "
        "router's restart"
    )

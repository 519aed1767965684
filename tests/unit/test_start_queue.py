"""The suite's start queue (tests/server_process.py), which starts the session's engines in the
background: one after another, each once the one before it is ready, and one whose user is done
before its turn never starts (no server outlives a session cut short)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.server_process import Shutdowns, StartQueue


class Recorded:
    """Stands in for a ServerProcess: says when it is started and stopped."""

    def __init__(self, name: str, events: list[str]) -> None:
        self.name = name
        self.events = events

    def start(self) -> None:
        self.events.append(f"start {self.name}")

    def terminate(self) -> None:
        self.events.append(f"stop {self.name}")

    def stop(self) -> None:
        self.terminate()


def ready_once(event: threading.Event, reached: threading.Event, process: Recorded) -> Any:
    def ready() -> Recorded:
        reached.set()
        assert event.wait(10)
        process.events.append(f"{process.name} ready")
        return process

    return ready


def test_each_start_waits_for_the_one_before_it_to_be_ready() -> None:
    events: list[str] = []
    first, second = Recorded("first", events), Recorded("second", events)
    queue = StartQueue()
    go, reached = threading.Event(), threading.Event()
    try:
        started_first = queue.submit([first], ready_once(go, reached, first))
        started_second = queue.submit([second], lambda: second)
        assert reached.wait(10)
        assert events == ["start first"]  # the second waits while the first is not ready
        go.set()
        assert started_first.result(timeout=10) is first
        assert started_second.result(timeout=10) is second
        assert events == ["start first", "first ready", "start second"]
    finally:
        go.set()
        queue.close()


def test_a_server_stopped_before_its_turn_never_starts() -> None:
    events: list[str] = []
    first, second = Recorded("first", events), Recorded("second", events)
    queue, shutdowns = StartQueue(), Shutdowns()
    go, reached = threading.Event(), threading.Event()
    try:
        queue.submit([first], ready_once(go, reached, first))
        started_second = queue.submit([second], lambda: second)
        assert reached.wait(10)
        queue.stop_later([second], shutdowns)
        go.set()
        with pytest.raises(RuntimeError, match="stopped before its turn"):
            started_second.result(timeout=10)
    finally:
        go.set()
        queue.close()
    assert "start second" not in events
    assert events == ["start first", "stop second", "first ready"]

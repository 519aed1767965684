"""The Responses API's store, in memory and in SQLite: what it keeps, for whom, and its bounds of
size and age (a clock the test moves)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from server.store.responses import (
    DAY_S,
    Bounds,
    MemoryResponses,
    ResponseStore,
    SqliteResponses,
    StoredResponse,
)

Make = Callable[[Bounds, Callable[[], float]], ResponseStore]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "sqlite"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Make:
    if request.param == "memory":
        return lambda bounds, clock: MemoryResponses(bounds, clock)
    return lambda bounds, clock: SqliteResponses(tmp_path / "node.db", bounds, clock)


def stored(number: int, created: float, org: str = "acme", text: str = "x") -> StoredResponse:
    item = {"id": f"msg_{number}", "type": "message", "role": "user", "content": text}
    return StoredResponse(f"resp_{number}", org, created, [item], {"id": f"resp_{number}"})


def test_a_response_is_kept_for_its_organization_only(make: Make) -> None:
    clock = Clock()
    store = make(Bounds.of(1, 30), clock)
    store.put(stored(1, clock.now))
    kept = store.get("resp_1", "acme")
    assert kept is not None and kept.input_items[0]["id"] == "msg_1"
    assert kept.response == {"id": "resp_1"}
    assert store.get("resp_1", "other") is None
    assert store.delete("resp_1", "other") is False and store.get("resp_1", "acme") is not None
    assert store.delete("resp_1", "acme") is True
    assert store.get("resp_1", "acme") is None and store.delete("resp_1", "acme") is False


def test_a_response_older_than_the_age_bound_is_gone(make: Make) -> None:
    clock = Clock()
    store = make(Bounds.of(1, 2), clock)
    store.put(stored(1, clock.now))
    clock.now += 1.5 * DAY_S
    store.put(stored(2, clock.now))
    assert store.get("resp_1", "acme") is not None
    clock.now += 1 * DAY_S  # the first is 2.5 days old, the second 1
    assert store.get("resp_1", "acme") is None
    assert store.get("resp_2", "acme") is not None


def test_past_the_size_bound_the_oldest_go_first(make: Make) -> None:
    clock = Clock()
    size = len(stored(1, clock.now, text="x" * 1000).encode())
    store = make(Bounds(max_bytes=3 * size, max_age_s=DAY_S), clock)
    for number in range(1, 6):
        clock.now += 1
        store.put(stored(number, clock.now, text="x" * 1000))
    kept = [n for n in range(1, 6) if store.get(f"resp_{n}", "acme") is not None]
    assert kept == [3, 4, 5]


def test_the_sqlite_store_keeps_responses_across_reopening(tmp_path: Path) -> None:
    clock = Clock()
    first = SqliteResponses(tmp_path / "node.db", Bounds.of(1, 30), clock)
    first.put(stored(1, clock.now))
    first.close()
    again = SqliteResponses(tmp_path / "node.db", Bounds.of(1, 30), clock)
    kept = again.get("resp_1", "acme")
    assert kept is not None and kept.created == clock.now

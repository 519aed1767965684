"""The Responses API's store, in memory and in SQLite: what it keeps, for whom, and its bounds of
size and age (a clock the test moves); SQLite's writes behind, off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

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


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """One event loop per test: the SQLite store's writer lives on it."""
    asyncio.run(test())


async def settled(store: ResponseStore) -> None:
    """What the SQLite store queued, written: reads go to the file."""
    if isinstance(store, SqliteResponses):
        assert await store.flush()


def test_a_response_is_kept_for_its_organization_only(make: Make) -> None:
    async def test() -> None:
        clock = Clock()
        store = make(Bounds.of(1, 30), clock)
        store.put(stored(1, clock.now))
        for _ in ("queued", "written"):
            kept = await store.get("resp_1", "acme")
            assert kept is not None and kept.input_items[0]["id"] == "msg_1"
            assert kept.response == {"id": "resp_1"}
            assert await store.get("resp_1", "other") is None
            await settled(store)
        assert await store.delete("resp_1", "other") is False
        assert await store.get("resp_1", "acme") is not None
        assert await store.delete("resp_1", "acme") is True
        assert await store.get("resp_1", "acme") is None
        assert await store.delete("resp_1", "acme") is False
        await store.close()

    run(test)


def test_a_response_older_than_the_age_bound_is_gone(make: Make) -> None:
    async def test() -> None:
        clock = Clock()
        store = make(Bounds.of(1, 2), clock)
        store.put(stored(1, clock.now))
        clock.now += 1.5 * DAY_S
        store.put(stored(2, clock.now))
        await settled(store)
        assert await store.get("resp_1", "acme") is not None
        clock.now += 1 * DAY_S  # the first is 2.5 days old, the second 1
        assert await store.get("resp_1", "acme") is None
        assert await store.get("resp_2", "acme") is not None
        await store.close()

    run(test)


def test_past_the_size_bound_the_oldest_go_first(make: Make) -> None:
    async def test() -> None:
        clock = Clock()
        size = len(stored(1, clock.now, text="x" * 1000).encode())
        store = make(Bounds(max_bytes=3 * size, max_age_s=DAY_S), clock)
        for number in range(1, 6):
            clock.now += 1
            store.put(stored(number, clock.now, text="x" * 1000))
            await settled(store)
        kept = [n for n in range(1, 6) if await store.get(f"resp_{n}", "acme") is not None]
        assert kept == [3, 4, 5]
        await store.close()

    run(test)


def test_the_sqlite_store_writes_what_is_queued_as_it_closes(tmp_path: Path) -> None:
    clock = Clock()

    async def put_and_close() -> None:
        first = SqliteResponses(tmp_path / "node.db", Bounds.of(1, 30), clock)
        first.put(stored(1, clock.now))  # closed at once: not yet written
        await first.close()

    async def reopen() -> None:
        again = SqliteResponses(tmp_path / "node.db", Bounds.of(1, 30), clock)
        kept = await again.get("resp_1", "acme")
        assert kept is not None and kept.created == clock.now
        await again.close()

    run(put_and_close)
    run(reopen)


def test_a_response_deleted_before_it_is_written_stays_deleted(tmp_path: Path) -> None:
    async def test() -> None:
        store = SqliteResponses(tmp_path / "node.db", Bounds.of(1, 30), Clock())
        store.put(stored(1, Clock().now))
        assert await store.delete("resp_1", "acme") is True
        await store.close()
        again = SqliteResponses(tmp_path / "node.db", Bounds.of(1, 30), Clock())
        assert await again.get("resp_1", "acme") is None
        await again.close()

    run(test)

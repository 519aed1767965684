"""The Responses API's store, in memory and in the node's SQLite store: what it keeps, for whom,
and its bounds of size and age (a clock the test moves); the node store's responses go through
the store's one writer, read from its queue first, then from the file."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from server.store.base import DAY_S, Bounds, StoredResponse
from server.store.responses import MemoryResponses, ResponseStore, StoreResponses
from server.store.sqlite import SqliteStore
from server.store.writer import StoreWriter

Make = Callable[[Bounds, Callable[[], float]], ResponseStore]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def in_store(store: SqliteStore, bounds: Bounds, clock: Callable[[], float]) -> StoreResponses:
    """As a node with `--db` keeps them: on the event loop, through the store's running writer."""
    writer = StoreWriter(store)
    writer.start()
    return StoreResponses(writer, bounds, clock)


@pytest.fixture(params=["memory", "sqlite"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Make:
    if request.param == "memory":
        return lambda bounds, clock: MemoryResponses(bounds, clock)
    return lambda bounds, clock: in_store(
        SqliteStore(tmp_path / "node.db", bounds, clock), bounds, clock
    )


def stored(number: int, created: float, org: str = "acme", text: str = "x") -> StoredResponse:
    item = {"id": f"msg_{number}", "type": "message", "role": "user", "content": text}
    return StoredResponse(f"resp_{number}", org, created, [item], {"id": f"resp_{number}"})


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """One event loop per test: the SQLite store's writer lives on it."""
    asyncio.run(test())


async def settled(store: ResponseStore) -> None:
    """What the writer queued, written: reads go to the file."""
    if isinstance(store, StoreResponses):
        assert await store.writer.synced()


async def end(store: ResponseStore) -> None:
    """As the node stops: the writer writes what waits, then the store closes."""
    if isinstance(store, StoreResponses):
        await store.writer.close()
        store.writer.store.close()


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
        await end(store)

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
        await end(store)

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
        await end(store)

    run(test)


def test_the_writer_writes_the_waiting_responses_as_it_closes(tmp_path: Path) -> None:
    clock, bounds = Clock(), Bounds.of(1, 30)

    async def put_and_close() -> None:
        first = in_store(SqliteStore(tmp_path / "node.db", bounds, clock), bounds, clock)
        first.put(stored(1, clock.now))  # closed at once: not yet written
        await end(first)

    async def reopen() -> None:
        again = in_store(SqliteStore(tmp_path / "node.db", bounds, clock), bounds, clock)
        kept = await again.get("resp_1", "acme")
        assert kept is not None and kept.created == clock.now
        await end(again)

    run(put_and_close)
    run(reopen)


def test_a_response_deleted_before_it_is_written_stays_deleted(tmp_path: Path) -> None:
    clock, bounds = Clock(), Bounds.of(1, 30)

    async def test() -> None:
        store = in_store(SqliteStore(tmp_path / "node.db", bounds, clock), bounds, clock)
        store.put(stored(1, clock.now))
        assert await store.delete("resp_1", "acme") is True
        assert await store.get("resp_1", "acme") is None
        await end(store)
        again = in_store(SqliteStore(tmp_path / "node.db", bounds, clock), bounds, clock)
        assert await again.get("resp_1", "acme") is None
        await end(again)

    run(test)


class SlowStore(SqliteStore):
    """Holds each write until the test lets it go: a write under way, neither waiting nor read."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.began = threading.Event()
        self.go_on = threading.Event()

    def write(self, *args: Any) -> None:
        self.began.set()
        self.go_on.wait(10)
        super().write(*args)


def test_a_response_being_written_is_found_and_its_deletion_follows_the_write(
    tmp_path: Path,
) -> None:
    clock, bounds = Clock(), Bounds.of(1, 30)

    async def test() -> None:
        slow = SlowStore(tmp_path / "node.db")
        store = in_store(slow, bounds, clock)
        store.put(stored(1, clock.now))
        await asyncio.to_thread(slow.began.wait, 10)  # taken from the queue, not yet committed
        assert await store.get("resp_1", "acme") is not None
        deleting = asyncio.ensure_future(store.delete("resp_1", "acme"))
        await asyncio.sleep(0)
        assert await store.get("resp_1", "acme") is None
        slow.go_on.set()
        assert await deleting is True
        assert slow.response("resp_1", "acme") is None  # the deletion was written after it
        await end(store)

    run(test)

"""Metering written ahead (server.node.metering) through the store's writer (server.store.writer)
on a real SQLite store: what is committed before output may go on, the reservations, the end,
and a store that fails."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from server.node.metering import RESERVE_TOKENS, Meter
from server.store.base import RequestEntry, UsageRecord
from server.store.sqlite import SqliteStore
from server.store.writer import StoreWriter


def begun(request_id: str = "req_1") -> UsageRecord:
    return UsageRecord(request_id, "key_1", "o", "p", "m", "chat", 10, 0, "running", 1.0, 1.0)


class FlakyStore(SqliteStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.is_broken = False

    def write(self, *args: Any) -> None:
        if self.is_broken:
            raise OSError("disk I/O error")
        super().write(*args)


def run(store: SqliteStore, body: Callable[[Meter, StoreWriter], Awaitable[None]]) -> None:
    async def main() -> None:
        writer = StoreWriter(store)
        writer.start()
        try:
            await body(Meter(writer), writer)
        finally:
            await writer.close()

    asyncio.run(main())


def output_of(store: SqliteStore, request_id: str = "req_1") -> tuple[str, int]:
    (record,) = [r for r in store.usage() if r.request_id == request_id]
    return record.status, record.output_tokens


def test_the_record_is_committed_with_a_reservation_before_the_first_output_goes_on(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "s.db")

    async def body(meter: Meter, writer: StoreWriter) -> None:
        meter.begin(begun(), max_tokens=256)
        waiting = meter.progress("req_1", 1)
        assert waiting is not None  # nothing committed yet: the first output waits
        await waiting
        assert output_of(store) == ("running", RESERVE_TOKENS)
        assert meter.progress("req_1", 2) is None  # covered: goes on at once

    run(store, body)


def test_output_past_the_committed_reservation_waits_for_the_next(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")

    async def body(meter: Meter, writer: StoreWriter) -> None:
        meter.begin(begun(), max_tokens=1000)
        await writer.synced()
        # Without a turn of the loop between outputs, the renewal queued midway is not yet
        # committed when the first reservation runs out.
        waits = [meter.progress("req_1", n) for n in range(1, RESERVE_TOKENS + 2)]
        assert waits[:RESERVE_TOKENS] == [None] * RESERVE_TOKENS
        last = waits[-1]
        assert last is not None
        await last
        status, output = output_of(store)
        assert status == "running"
        assert RESERVE_TOKENS + 1 <= output <= 2 * RESERVE_TOKENS + 1

    run(store, body)


def test_reservations_stay_within_max_tokens(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")

    async def body(meter: Meter, writer: StoreWriter) -> None:
        meter.begin(begun(), max_tokens=5)
        await writer.synced()
        assert output_of(store) == ("running", 5)
        for n in range(1, 6):
            assert meter.progress("req_1", n) is None

    run(store, body)


def test_the_end_settles_the_exact_counts(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")

    async def body(meter: Meter, writer: StoreWriter) -> None:
        meter.begin(begun(), max_tokens=256)
        for n in range(1, 4):
            waiting = meter.progress("req_1", n)
            if waiting is not None:
                await waiting
        meter.end("req_1", "succeeded", 10, 3)
        await meter.synced()
        assert output_of(store) == ("succeeded", 3)
        assert store.key_spend("key_1") == 13

    run(store, body)


def test_a_failing_store_holds_no_output_and_loses_no_record(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "s.db")
    store.is_broken = True

    async def body(meter: Meter, writer: StoreWriter) -> None:
        meter.begin(begun(), max_tokens=256)
        waiting = meter.progress("req_1", 1)
        assert waiting is not None
        await waiting  # the write failed: released, not held
        assert writer.is_failing
        assert all(meter.progress("req_1", n) is None for n in range(2, 100))
        meter.end("req_1", "succeeded", 10, 99)
        await meter.synced()  # returns at once while the store fails
        assert store.usage() == []
        store.is_broken = False
        while not await writer.synced():  # retried until the store takes it
            pass
        assert output_of(store) == ("succeeded", 99)

    run(store, body)


def test_what_a_killed_process_left_running_is_interrupted_at_the_next_start(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "s.db")
    entry = RequestEntry("req_1", "o", "running", 1.0, {"id": "req_1", "status": "running"})
    store.write([begun()], [entry])

    async def main() -> int:
        writer = StoreWriter(store)
        interrupted = writer.start()
        await writer.close()
        return interrupted

    assert asyncio.run(main()) == 1
    assert output_of(store) == ("interrupted", 0)
    found = store.request_entry("req_1")
    assert found is not None
    assert found.status == found.wire["status"] == "interrupted"


class ThreadNotingStore(SqliteStore):
    """The real store, noting the thread each spend read runs on."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.read_on: list[int] = []

    def key_spend(self, key_id: str) -> int:
        self.read_on.append(threading.get_ident())
        return super().key_spend(key_id)


def test_a_keys_spend_is_read_from_the_store_once_off_the_event_loop(tmp_path: Path) -> None:
    """The spend cap's check reads what earlier processes metered in a worker thread, once per
    key; then this process's own requests count on top of it."""
    path = tmp_path / "s.db"
    earlier = SqliteStore(path)
    earlier.write([dataclasses.replace(begun("req_0"), status="succeeded", output_tokens=5)], [])
    earlier.close()
    store = ThreadNotingStore(path)

    async def body(meter: Meter, writer: StoreWriter) -> None:
        assert await meter.spent("key_1") == 15
        meter.begin(begun("req_1"), max_tokens=8)
        waiting = meter.progress("req_1", 3)
        if waiting is not None:
            await waiting
        assert await meter.spent("key_1") == 15 + 10 + 3  # its prompt and what it generated
        assert store.read_on and threading.get_ident() not in store.read_on
        assert len(store.read_on) == 1

    run(store, body)

"""The request log (server.requestlog) kept in the store: written as a request begins and ends,
read back by a later process, bounded there."""

from __future__ import annotations

import asyncio
from pathlib import Path

from server.requestlog import RequestLog, RequestRecord
from server.store.base import RequestEntry
from server.store.sqlite import SqliteStore
from server.store.writer import StoreWriter
from server.timing import Timing


def test_an_entry_is_read_back_from_the_store_by_a_later_process(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")

    async def first_run() -> None:
        writer = StoreWriter(store)
        writer.start()
        log = RequestLog(writer=writer)
        record = log.add(RequestRecord("req_1", "messages", "m", Timing(), "acme", stream=True))
        record.prompt_tokens = 12
        await writer.synced()
        record.status = "succeeded"
        record.completion_tokens = 3
        record.duration_ms = 7.5
        log.update(record)
        await writer.close()

    async def second_run() -> tuple[RequestEntry | None, RequestEntry | None]:
        log = RequestLog(writer=StoreWriter(store))
        return await log.entry("req_1"), await log.entry("req_2")

    asyncio.run(first_run())
    entry, missing = asyncio.run(second_run())
    assert missing is None
    assert entry is not None
    assert entry.org == "acme"
    assert entry.wire["status"] == "succeeded"
    assert entry.wire["usage"] == {"prompt_tokens": 12, "completion_tokens": 3, "cached_tokens": 0}
    assert entry.wire["duration_ms"] == 7.5
    assert entry.wire["stream"] is True


def test_an_open_node_keeps_the_log_in_memory_only() -> None:
    log = RequestLog()
    log.add(RequestRecord("req_1", "messages", "m", Timing(), "acme"))
    entry = asyncio.run(log.entry("req_1"))
    assert entry is not None
    assert entry.wire["status"] == "running"


def test_the_store_keeps_the_newest_entries(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    entries = [RequestEntry(f"req_{i:02d}", "o", "succeeded", float(i), {}) for i in range(10)]
    store.write([], entries)
    assert store.prune_requests(4) == 6
    assert store.request_entry("req_05") is None
    assert all(store.request_entry(f"req_{i:02d}") is not None for i in range(6, 10))
    assert store.prune_requests(4) == 0

"""The store's one writer (server.store.writer) on a real SQLite store, a failure injected where a
test needs one: a write failing with any error is retried until its rows are written, logged once
a streak; what waits is bounded, and past the bound the node admits no new request while
everything already queued is still written."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from server.config import Settings
from server.errors import BackendUnavailable
from server.state import STORE_RETRY_AFTER, ServerState
from server.store import writer as writer_module
from server.store.base import Bounds, RequestEntry, StoredResponse, UsageRecord
from server.store.responses import StoreResponses
from server.store.sqlite import SqliteStore
from server.store.writer import MAX_WAITING_ROWS, StoreWriter


def record(number: int) -> UsageRecord:
    return UsageRecord(f"req_{number}", None, "acme", "p", "m", "chat", 1, 1, "succeeded", 1.0, 1.0)


def entry(number: int) -> RequestEntry:
    return RequestEntry(f"req_{number}", "acme", "succeeded", 1.0, {"id": f"req_{number}"})


def kept(number: int, text: str = "x") -> StoredResponse:
    item = {"id": f"msg_{number}", "type": "message", "role": "user", "content": text}
    return StoredResponse(f"resp_{number}", "acme", time.time(), [item], {"id": f"resp_{number}"})


def failing(store: SqliteStore, monkeypatch: pytest.MonkeyPatch, errors: list[Exception]) -> None:
    """The store's writes raise these errors, one a write, then succeed."""
    write = store.write

    def flaky(*args: Any) -> None:
        if errors:
            raise errors.pop(0)
        write(*args)

    monkeypatch.setattr(store, "write", flaky)


async def written(writer: StoreWriter) -> None:
    """Until what is queued is committed, a retry a round."""
    for _ in range(50):
        if await writer.synced():
            return
    raise AssertionError("never written")


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "RETRY_S", 0.01)


def test_a_write_failing_with_any_error_is_retried_until_the_kept_response_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqliteStore(tmp_path / "s.db", Bounds.of(1, 30))
    failing(store, monkeypatch, [RuntimeError("not an sqlite3 error"), KeyError("nor this")])

    async def test() -> None:
        writer = StoreWriter(store)
        writer.start()
        responses = StoreResponses(writer, Bounds.of(1, 30))
        responses.put(kept(1))
        assert not await writer.synced()  # the first write failed: the loop goes on
        assert writer.is_failing
        assert await responses.get("resp_1", "acme") is not None  # waiting: found all the same
        await written(writer)
        assert not writer.is_failing
        responses.put(kept(2))  # the writer still runs
        await written(writer)
        await writer.close()

    with caplog.at_level(logging.WARNING, logger=writer_module.__name__):
        asyncio.run(test())
    assert store.response("resp_1", "acme") is not None
    assert store.response("resp_2", "acme") is not None
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # once a streak of failures, saying what to do
    assert "Check the store's disk" in errors[0].getMessage()
    assert any("written again" in r.getMessage() for r in caplog.records)


def test_past_its_bound_of_rows_the_writer_is_full_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteStore(tmp_path / "s.db", Bounds.of(1, 30))
    failing(store, monkeypatch, [OSError("disk full")] * 3)

    async def test() -> None:
        writer = StoreWriter(store, max_waiting_rows=3)
        writer.start()
        writer.put_usage(record(1))
        writer.put_request(entry(1))
        assert not await writer.synced()
        assert not writer.is_full
        writer.put_response(kept(1))
        assert writer.is_full
        writer.put_usage(record(2))  # an admitted request's: taken all the same
        await written(writer)
        assert not writer.is_full
        await writer.close()

    asyncio.run(test())
    assert [r.request_id for r in store.usage()] == ["req_1", "req_2"]
    assert store.request_entry("req_1") is not None
    assert store.response("resp_1", "acme") is not None


def test_past_its_bound_of_bytes_the_writer_is_full(tmp_path: Path) -> None:
    size = len(kept(1, "x" * 1000).encode())
    writer = StoreWriter(SqliteStore(tmp_path / "s.db"), max_waiting_bytes=2 * size)
    writer.put_response(kept(1, "x" * 1000))
    writer.put_response(kept(1, "x" * 1000))  # replaces the first: counted once
    assert not writer.is_full
    writer.put_response(kept(2, "x" * 1000))
    assert writer.is_full
    writer.delete_response("resp_2")
    assert not writer.is_full


def test_a_node_whose_writer_is_full_refuses_new_requests(tmp_path: Path) -> None:
    state = ServerState(Settings(db=tmp_path / "s.db"))
    assert state.writer is not None
    state.check_store_room()
    for number in range(MAX_WAITING_ROWS):  # not started: nothing is written
        state.writer.put_usage(record(number))
    with pytest.raises(BackendUnavailable) as refused:
        state.check_store_room()
    assert refused.value.status == 503
    assert refused.value.retry_after == STORE_RETRY_AFTER

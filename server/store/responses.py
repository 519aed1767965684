"""Stored responses (the Responses API's `store`): each response object with the conversation it
answered, as input items, owned by its organization (another is told there is no such response).
In memory, or in the node's SQLite file with `--db` (they survive a restart); both bounded by
size and by age, the oldest dropped first."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

log = logging.getLogger(__name__)

DAY_S = 86_400.0
RETRY_S = 0.5


@dataclass(frozen=True, slots=True)
class StoredResponse:
    response_id: str
    org: str
    created: float  # Unix seconds
    input_items: list[dict[str, Any]]  # everything before the answer (previous turns included)
    response: dict[str, Any]  # the response object, as it was answered

    def encode(self) -> bytes:
        return orjson.dumps({"input_items": self.input_items, "response": self.response})


@dataclass(frozen=True, slots=True)
class Bounds:
    max_bytes: int
    max_age_s: float

    @classmethod
    def of(cls, max_mb: float, max_days: float) -> Bounds:
        return cls(int(max_mb * 1024 * 1024), max_days * DAY_S)


class ResponseStore(Protocol):
    def put(self, stored: StoredResponse) -> None:
        """Keeps it (replacing one of the same id): `get` finds it from this call on. On the
        event loop."""
        ...

    async def get(self, response_id: str, org: str) -> StoredResponse | None:
        """None for an unknown id, an expired one, or one another organization stored."""
        ...

    async def delete(self, response_id: str, org: str) -> bool:
        """Whether there was one to delete (for this organization)."""
        ...

    async def close(self) -> None:
        """Writes what is kept but not yet written, where that applies."""
        ...


class MemoryResponses:
    """Implements `ResponseStore` in this process (gone with it)."""

    def __init__(self, bounds: Bounds, clock: Callable[[], float] = time.time) -> None:
        self._bounds = bounds
        self._clock = clock
        self._kept: OrderedDict[str, tuple[StoredResponse, int]] = OrderedDict()  # oldest first
        self._bytes = 0

    def put(self, stored: StoredResponse) -> None:
        size = len(stored.encode())
        self._drop(stored.response_id)
        self._kept[stored.response_id] = (stored, size)
        self._bytes += size
        self._prune()

    async def get(self, response_id: str, org: str) -> StoredResponse | None:
        return self._get(response_id, org)

    async def delete(self, response_id: str, org: str) -> bool:
        if self._get(response_id, org) is None:
            return False
        self._drop(response_id)
        return True

    async def close(self) -> None:
        self._kept.clear()

    def _get(self, response_id: str, org: str) -> StoredResponse | None:
        self._prune()
        found = self._kept.get(response_id)
        return found[0] if found is not None and found[0].org == org else None

    def _drop(self, response_id: str) -> None:
        found = self._kept.pop(response_id, None)
        if found is not None:
            self._bytes -= found[1]

    def _prune(self) -> None:
        oldest = self._clock() - self._bounds.max_age_s
        while self._kept:
            stored, _ = next(iter(self._kept.values()))
            if stored.created >= oldest and self._bytes <= self._bounds.max_bytes:
                return
            self._drop(stored.response_id)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    response_id TEXT PRIMARY KEY,
    org TEXT NOT NULL,
    created REAL NOT NULL,
    size INTEGER NOT NULL,
    body BLOB NOT NULL  -- JSON: input_items and response
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created);
"""


class SqliteResponses:
    """Implements `ResponseStore` in the node's SQLite file (WAL, as the rest of the store): they
    survive a restart. Off the event loop: a response put is held in memory at once (the client's
    next request may continue it the moment its answer ends) and written behind in a worker
    thread, each batch in one transaction with the bounds; reads and deletes go to the thread
    too, one use of the connection at a time. A failed write is logged and retried every
    `RETRY_S`; meanwhile the responses held are still found."""

    def __init__(self, path: Path, bounds: Bounds, clock: Callable[[], float] = time.time) -> None:
        self._bounds = bounds
        self._clock = clock
        # Used by one worker thread at a time (under `_lock`), never by two at once.
        self._db = sqlite3.connect(
            path, timeout=10.0, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._queued: dict[str, StoredResponse] = {}  # put, not yet written
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._is_failing = False

    def put(self, stored: StoredResponse) -> None:
        self._queued[stored.response_id] = stored
        if self._task is None:  # the first put: on the event loop, which the writer joins
            self._task = asyncio.get_running_loop().create_task(self._write_loop())
        self._wake.set()

    async def get(self, response_id: str, org: str) -> StoredResponse | None:
        oldest = self._clock() - self._bounds.max_age_s
        queued = self._queued.get(response_id)
        if queued is not None:
            return queued if queued.org == org and queued.created >= oldest else None
        async with self._lock:  # a write that took it from the queue has committed it
            return await asyncio.to_thread(self._read, response_id, org, oldest)

    async def delete(self, response_id: str, org: str) -> bool:
        async with self._lock:
            queued = self._queued.get(response_id)
            was_queued = queued is not None and queued.org == org
            if was_queued:
                del self._queued[response_id]
            deleted = await asyncio.to_thread(self._delete, response_id, org)
        return was_queued or deleted

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        if self._queued and not await self.flush():
            log.error("response store: %d responses were not written", len(self._queued))
        async with self._lock:
            await asyncio.to_thread(self._db.close)

    async def _write_loop(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            if not await self.flush() and not self._closing:
                await asyncio.sleep(RETRY_S)
                self._wake.set()

    async def flush(self) -> bool:
        """Writes what is queued now (the writer does soon); True when it was committed (or
        nothing was queued)."""
        async with self._lock:
            batch = list(self._queued.values())
            if not batch:
                return True
            try:
                await asyncio.to_thread(self._write, batch)
            except sqlite3.Error:
                if not self._is_failing:
                    log.exception("response store: writes fail; retrying every %.1f s", RETRY_S)
                self._is_failing = True
                return False
            if self._is_failing:
                log.warning("response store: written again")
            self._is_failing = False
            for stored in batch:  # what was put again meanwhile stays queued
                if self._queued.get(stored.response_id) is stored:
                    del self._queued[stored.response_id]
            return True

    # In a worker thread, under `_lock`:

    def _write(self, batch: list[StoredResponse]) -> None:
        rows = []
        for stored in batch:
            body = stored.encode()
            rows.append((stored.response_id, stored.org, stored.created, len(body), body))
        with self._db:  # one transaction: the responses, then the bounds
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)", rows)
            self._prune()

    def _read(self, response_id: str, org: str, oldest: float) -> StoredResponse | None:
        row = self._db.execute(
            "SELECT created, body FROM responses WHERE response_id = ? AND org = ? "
            "AND created >= ?",
            (response_id, org, oldest),
        ).fetchone()
        if row is None:
            return None
        data = orjson.loads(row[1])
        return StoredResponse(response_id, org, row[0], data["input_items"], data["response"])

    def _delete(self, response_id: str, org: str) -> bool:
        cursor = self._db.execute(
            "DELETE FROM responses WHERE response_id = ? AND org = ?", (response_id, org)
        )
        return cursor.rowcount > 0

    def _prune(self) -> None:
        oldest = self._clock() - self._bounds.max_age_s
        self._db.execute("DELETE FROM responses WHERE created < ?", (oldest,))
        (total,) = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()
        if total <= self._bounds.max_bytes:
            return
        # The oldest go until the rest fit.
        self._db.execute(
            "DELETE FROM responses WHERE response_id IN (SELECT response_id FROM ("
            " SELECT response_id, SUM(size) OVER (ORDER BY created DESC, response_id DESC) AS kept"
            " FROM responses) WHERE kept > ?)",
            (self._bounds.max_bytes,),
        )

"""Stored responses (the Responses API's `store`): each response object with the conversation it
answered, as input items, owned by its organization (another is told there is no such response).
In memory, or in the node's SQLite file with `--db` (they survive a restart); both bounded by
size and by age, the oldest dropped first."""

from __future__ import annotations

import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

DEFAULT_MAX_MB = 256
DEFAULT_MAX_DAYS = 30.0
DAY_S = 86_400.0


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
    def put(self, stored: StoredResponse) -> None: ...

    def get(self, response_id: str, org: str) -> StoredResponse | None:
        """None for an unknown id, an expired one, or one another organization stored."""
        ...

    def delete(self, response_id: str, org: str) -> bool: ...

    def close(self) -> None: ...


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

    def get(self, response_id: str, org: str) -> StoredResponse | None:
        self._prune()
        found = self._kept.get(response_id)
        return found[0] if found is not None and found[0].org == org else None

    def delete(self, response_id: str, org: str) -> bool:
        if self.get(response_id, org) is None:
            return False
        self._drop(response_id)
        return True

    def close(self) -> None:
        self._kept.clear()

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
    """Implements `ResponseStore` in the node's SQLite file (WAL, as the rest of the store), on
    the event loop's thread: a response is a few kilobytes, written in a millisecond, and is
    there for the client's next request the moment its answer ends."""

    def __init__(self, path: Path, bounds: Bounds, clock: Callable[[], float] = time.time) -> None:
        self._bounds = bounds
        self._clock = clock
        self._db = sqlite3.connect(path, timeout=10.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def put(self, stored: StoredResponse) -> None:
        body = stored.encode()
        with self._db:  # one transaction: the response, then the bounds
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)",
                (stored.response_id, stored.org, stored.created, len(body), body),
            )
            self._prune()

    def get(self, response_id: str, org: str) -> StoredResponse | None:
        row = self._db.execute(
            "SELECT created, body FROM responses WHERE response_id = ? AND org = ? "
            "AND created >= ?",
            (response_id, org, self._clock() - self._bounds.max_age_s),
        ).fetchone()
        if row is None:
            return None
        data = orjson.loads(row[1])
        return StoredResponse(response_id, org, row[0], data["input_items"], data["response"])

    def delete(self, response_id: str, org: str) -> bool:
        cursor = self._db.execute(
            "DELETE FROM responses WHERE response_id = ? AND org = ?", (response_id, org)
        )
        return cursor.rowcount > 0

    def close(self) -> None:
        self._db.close()

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

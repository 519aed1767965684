"""The embedded store: SQLite in WAL mode (readers never wait for the writer, and a committed
record survives the process being killed), one connection per thread. Kept responses are bounded
by size and age, the oldest dropped as each batch of them is written."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import orjson

from server.store.base import (
    Bounds,
    KeyRecord,
    RequestEntry,
    StoredResponse,
    UsageRecord,
    UsageTotal,
)

UNBOUNDED = Bounds(max_bytes=2**62, max_age_s=float("inf"))  # the commands: they keep none

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY,
    key_hash TEXT NOT NULL UNIQUE,
    org TEXT NOT NULL,
    project TEXT NOT NULL,
    scopes TEXT NOT NULL,
    created REAL NOT NULL,
    expires_at REAL,
    spend_cap_tokens INTEGER,
    revoked_at REAL
);
CREATE TABLE IF NOT EXISTS usage (
    request_id TEXT PRIMARY KEY,
    key_id TEXT,
    org TEXT NOT NULL,
    project TEXT NOT NULL,
    model TEXT NOT NULL,
    route TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_by_key ON usage (key_id);
CREATE INDEX IF NOT EXISTS usage_by_org ON usage (org, project);
CREATE TABLE IF NOT EXISTS requests (
    request_id TEXT PRIMARY KEY,  -- time-ordered: the newest sort last
    org TEXT NOT NULL,
    status TEXT NOT NULL,  -- wins over the entry's own (interrupted after a kill)
    created REAL NOT NULL,
    entry TEXT NOT NULL  -- the wire object, JSON
);
CREATE TABLE IF NOT EXISTS responses (
    response_id TEXT PRIMARY KEY,
    org TEXT NOT NULL,
    created REAL NOT NULL,
    size INTEGER NOT NULL,
    body BLOB NOT NULL  -- JSON: input_items and response
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created);
"""


class SqliteStore:
    """Implements `server.store.base.Store`."""

    def __init__(
        self, path: Path, bounds: Bounds = UNBOUNDED, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self._bounds = bounds  # of kept responses
        self._clock = clock
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._connection().executescript(_SCHEMA)  # idempotent; executescript commits itself

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(
                self.path, timeout=10.0, isolation_level=None, check_same_thread=False
            )
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")  # WAL: durable across process crashes
            connection.row_factory = sqlite3.Row
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def add_key(self, key: KeyRecord) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key.key_id,
                    key.key_hash,
                    key.org,
                    key.project,
                    json.dumps(list(key.scopes)),
                    key.created,
                    key.expires_at,
                    key.spend_cap_tokens,
                    key.revoked_at,
                ),
            )

    def key_by_hash(self, key_hash: str) -> KeyRecord | None:
        row = (
            self._connection()
            .execute("SELECT * FROM api_keys WHERE key_hash = ?", (key_hash,))
            .fetchone()
        )
        return None if row is None else _key(row)

    def keys(self, org: str | None = None) -> list[KeyRecord]:
        return [_key(row) for row in self._rows("api_keys", org)]

    def _rows(self, table: str, org: str | None) -> list[sqlite3.Row]:
        """A table's rows, oldest first, of one organization or all."""
        where, args = ("WHERE org = ?", (org,)) if org is not None else ("", ())
        query = f"SELECT * FROM {table} {where} ORDER BY created"  # table: ours, not input
        return self._connection().execute(query, args).fetchall()

    def revoke_key(self, key_id: str) -> bool:
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
                (time.time(), key_id),
            )
        return cursor.rowcount == 1

    def write(
        self,
        usage: Sequence[UsageRecord],
        requests: Sequence[RequestEntry],
        responses: Sequence[StoredResponse] = (),
        deleted: Sequence[str] = (),
    ) -> None:
        if not (usage or requests or responses or deleted):
            return
        with self._transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.request_id,
                        r.key_id,
                        r.org,
                        r.project,
                        r.model,
                        r.route,
                        r.input_tokens,
                        r.output_tokens,
                        r.status,
                        r.created,
                        r.updated,
                    )
                    for r in usage
                ],
            )
            db.executemany(
                "INSERT OR REPLACE INTO requests VALUES (?, ?, ?, ?, ?)",
                [
                    (e.request_id, e.org, e.status, e.created, orjson.dumps(e.wire).decode())
                    for e in requests
                ],
            )
            if responses or deleted:
                self._write_responses(db, responses, deleted)

    def _write_responses(
        self, db: sqlite3.Connection, responses: Sequence[StoredResponse], deleted: Sequence[str]
    ) -> None:
        rows = []
        for stored in responses:
            body = stored.encode()
            rows.append((stored.response_id, stored.org, stored.created, len(body), body))
        db.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)", rows)
        db.executemany("DELETE FROM responses WHERE response_id = ?", [(id_,) for id_ in deleted])
        db.execute("DELETE FROM responses WHERE created < ?", (self._bounds.oldest(self._clock()),))
        (total,) = db.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()
        if total <= self._bounds.max_bytes:
            return
        # The oldest go until the rest fit.
        db.execute(
            "DELETE FROM responses WHERE response_id IN (SELECT response_id FROM ("
            " SELECT response_id, SUM(size) OVER (ORDER BY created DESC, response_id DESC) AS kept"
            " FROM responses) WHERE kept > ?)",
            (self._bounds.max_bytes,),
        )

    def usage(self, org: str | None = None) -> list[UsageRecord]:
        return [UsageRecord(**dict(row)) for row in self._rows("usage", org)]

    def request_entry(self, request_id: str) -> RequestEntry | None:
        row = (
            self._connection()
            .execute("SELECT * FROM requests WHERE request_id = ?", (request_id,))
            .fetchone()
        )
        if row is None:
            return None
        wire = orjson.loads(row["entry"])
        wire["status"] = row["status"]
        return RequestEntry(row["request_id"], row["org"], row["status"], row["created"], wire)

    def response(self, response_id: str, org: str) -> StoredResponse | None:
        row = (
            self._connection()
            .execute(
                "SELECT created, body FROM responses WHERE response_id = ? AND org = ? "
                "AND created >= ?",
                (response_id, org, self._bounds.oldest(self._clock())),
            )
            .fetchone()
        )
        if row is None:
            return None
        data = orjson.loads(row["body"])
        return StoredResponse(
            response_id, org, row["created"], data["input_items"], data["response"]
        )

    def prune_requests(self, keep: int) -> int:
        with self._transaction() as db:
            cursor = db.execute(
                "DELETE FROM requests WHERE request_id < (SELECT request_id FROM requests "
                "ORDER BY request_id DESC LIMIT 1 OFFSET ?)",
                (max(keep, 1) - 1,),
            )
        return cursor.rowcount

    def interrupt_running(self) -> int:
        with self._transaction() as db:
            cursor = db.execute("UPDATE usage SET status = 'interrupted' WHERE status = 'running'")
            db.execute("UPDATE requests SET status = 'interrupted' WHERE status = 'running'")
        return cursor.rowcount

    def usage_totals(self, org: str | None = None) -> list[UsageTotal]:
        where, args = ("WHERE org = ?", (org,)) if org is not None else ("", ())
        rows = (
            self._connection()
            .execute(
                "SELECT org, project, key_id, model, COUNT(*) AS requests, "
                "SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens "
                f"FROM usage {where} GROUP BY org, project, key_id, model "
                "ORDER BY org, project, key_id, model",
                args,
            )
            .fetchall()
        )
        return [UsageTotal(**dict(row)) for row in rows]

    def key_spend(self, key_id: str) -> int:
        row = (
            self._connection()
            .execute(
                "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM usage WHERE key_id = ?",
                (key_id,),
            )
            .fetchone()
        )
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()


def _key(row: sqlite3.Row) -> KeyRecord:
    values = dict(row)
    values["scopes"] = tuple(json.loads(values["scopes"]))
    return KeyRecord(**values)

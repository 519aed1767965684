"""Metering: each request's `infer.input_tokens` and `infer.output_tokens`, for its key, project
and organization, written to the store as the request goes. A record is written when the request
is admitted, its output count is written again at most every `FLUSH_INTERVAL_S` while it
streams, and its final counts as soon as it ends: an abandoned stream is billed to its last
generated token, and a killed process loses at most the last interval's tokens of the requests
it was running (each then billed to its last written count)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time

from server.store.base import Store, UsageRecord

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.1


class Meter:
    def __init__(self, store: Store | None) -> None:
        self._store = store
        self._records: dict[str, UsageRecord] = {}  # requests not yet ended, by id
        self._dirty: dict[str, UsageRecord] = {}
        self._spent: dict[str, int] = {}  # key id -> tokens metered, once asked for
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Starts the writer; records a killed process left `running` become `interrupted`
        (one server per store)."""
        if self._store is not None:
            interrupted = self._store.interrupt_running()
            if interrupted:
                log.warning(
                    "metering: %d requests of a previous run were cut short; billed to their "
                    "last recorded tokens",
                    interrupted,
                )
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        await self._flush()

    def spent(self, key_id: str) -> int:
        """Input and output tokens metered for the key so far, this process's included."""
        if key_id not in self._spent:
            stored = self._store.key_spend(key_id) if self._store is not None else 0
            self._spent[key_id] = stored
        return self._spent[key_id]

    def begin(self, record: UsageRecord) -> None:
        self._records[record.request_id] = record
        self._charge(record.key_id, record.input_tokens + record.output_tokens)
        self._mark(record)

    def progress(self, request_id: str, output_tokens: int) -> None:
        record = self._records.get(request_id)
        if record is None or output_tokens == record.output_tokens:
            return
        self._update(record, output_tokens=output_tokens)

    def end(self, request_id: str, status: str, input_tokens: int, output_tokens: int) -> None:
        record = self._records.pop(request_id, None)
        if record is None:
            return
        self._update(record, input_tokens=input_tokens, output_tokens=output_tokens, status=status)
        self._wake.set()  # ended: written now, not at the next interval

    def _update(self, record: UsageRecord, **changes: object) -> None:
        updated = dataclasses.replace(record, **changes, updated=time.time())  # type: ignore[arg-type]
        delta = (updated.input_tokens + updated.output_tokens) - (
            record.input_tokens + record.output_tokens
        )
        self._charge(record.key_id, delta)
        if updated.status == "running":
            self._records[record.request_id] = updated
        self._mark(updated)

    def _charge(self, key_id: str | None, tokens: int) -> None:
        if key_id is not None and key_id in self._spent:
            self._spent[key_id] += tokens

    def _mark(self, record: UsageRecord) -> None:
        self._dirty[record.request_id] = record

    async def _write_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=FLUSH_INTERVAL_S)
            self._wake.clear()
            await self._flush()

    async def _flush(self) -> None:
        if self._store is None or not self._dirty:
            self._dirty.clear()
            return
        records, self._dirty = list(self._dirty.values()), {}
        try:
            await asyncio.to_thread(self._store.write_usage, records)
        except Exception:
            log.exception("metering: %d records not written; retrying", len(records))
            for record in records:  # newer versions written meanwhile win
                self._dirty.setdefault(record.request_id, record)

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
from dataclasses import dataclass

from server.store.base import Store, UsageRecord

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.1


@dataclass(slots=True)
class _Open:
    """A request being metered: its record as begun, and its output so far."""

    record: UsageRecord
    output_tokens: int = 0


class Meter:
    def __init__(self, store: Store | None) -> None:
        self._store = store
        self._open: dict[str, _Open] = {}  # requests not yet ended, by id
        self._dirty: set[str] = set()  # open requests whose output grew since the last write
        self._ended: dict[str, UsageRecord] = {}  # final records not yet written
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
        if self._store is None:
            return  # an open node: no key, nothing to bill
        self._open[record.request_id] = _Open(record, record.output_tokens)
        self._charge(record.key_id, record.input_tokens + record.output_tokens)
        self._dirty.add(record.request_id)

    def progress(self, request_id: str, output_tokens: int) -> None:
        """On every engine output: kept cheap, the record is built when written."""
        metered = self._open.get(request_id)
        if metered is None or output_tokens == metered.output_tokens:
            return
        self._charge(metered.record.key_id, output_tokens - metered.output_tokens)
        metered.output_tokens = output_tokens
        self._dirty.add(request_id)

    def end(self, request_id: str, status: str, input_tokens: int, output_tokens: int) -> None:
        metered = self._open.pop(request_id, None)
        if metered is None:
            return
        self._dirty.discard(request_id)
        begun = metered.record
        self._charge(
            begun.key_id, input_tokens + output_tokens - begun.input_tokens - metered.output_tokens
        )
        self._ended[request_id] = dataclasses.replace(
            begun,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            status=status,
            updated=time.time(),
        )
        self._wake.set()  # ended: written now, not at the next interval

    def _charge(self, key_id: str | None, tokens: int) -> None:
        if key_id is not None and key_id in self._spent:
            self._spent[key_id] += tokens

    def _pending(self) -> list[UsageRecord]:
        """What the store has not seen yet, taken: final records and grown open ones."""
        now = time.time()
        records = list(self._ended.values())
        for request_id in self._dirty:
            metered = self._open[request_id]
            records.append(
                dataclasses.replace(
                    metered.record, output_tokens=metered.output_tokens, updated=now
                )
            )
        self._ended, self._dirty = {}, set()
        return records

    async def _write_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=FLUSH_INTERVAL_S)
            self._wake.clear()
            await self._flush()

    async def _flush(self) -> None:
        records = self._pending()
        if self._store is None or not records:
            return
        try:
            await asyncio.to_thread(self._store.write_usage, records)
        except Exception:
            log.exception("metering: %d records not written; retrying", len(records))
            for record in records:  # newer versions taken meanwhile win
                if record.request_id in self._open:
                    self._dirty.add(record.request_id)
                else:
                    self._ended.setdefault(record.request_id, record)

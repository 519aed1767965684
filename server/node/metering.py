"""Metering: each request's `infer.input_tokens` and `infer.output_tokens`, for its key, project
and organization, written ahead. Its record is queued for the store as the request is admitted and
committed before any output can reach the client, with output tokens reserved (`RESERVE_TOKENS`,
within max_tokens); output beyond the committed reservation waits for the next one, queued as
the answer nears it (in steady state nobody waits); the end settles the record with the exact
counts, before a finished answer's finish goes out. Killed at any moment, a process leaves each
of its requests billed at least what its client received and at most `RESERVE_TOKENS` more than
was generated (`interrupted` at the next start). While the store fails, answers go on unwaited
and their records are retried (see `server.store.writer`)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from server.store.base import UsageRecord
from server.store.writer import StoreWriter

RESERVE_TOKENS = 16  # output tokens reserved beyond those going to the client
RENEW_AT = RESERVE_TOKENS // 2  # a new reservation is queued when fewer than this are left


@dataclass(slots=True)
class _Open:
    """A request being metered: its record as begun, its output so far, its reservations."""

    record: UsageRecord
    max_tokens: int | None
    output_tokens: int = 0
    reserved: int = 0  # output tokens of the newest record queued
    covered: int = 0  # output tokens of the newest record committed


class Meter:
    def __init__(self, writer: StoreWriter | None) -> None:
        self._writer = writer
        self._open: dict[str, _Open] = {}  # requests not yet ended, by id
        self._spent: dict[str, int] = {}  # key id -> tokens metered, once asked for
        if writer is not None:
            writer.on_usage_committed = self._committed

    async def spent(self, key_id: str) -> int:
        """Input and output tokens metered for the key so far, this process's included. The
        store is read once per key, in a worker thread, off the event loop."""
        if key_id not in self._spent:
            stored = 0
            if self._writer is not None:
                stored = await asyncio.to_thread(self._writer.store.key_spend, key_id)
            self._spent.setdefault(key_id, stored)  # another request may have read it meanwhile
        return self._spent[key_id]

    def begin(self, record: UsageRecord, max_tokens: int | None) -> None:
        """Queues the record with its first reservation; the writer commits it at once."""
        if self._writer is None:
            return  # an open node: no key, nothing to bill
        metered = _Open(record, max_tokens, record.output_tokens)
        self._open[record.request_id] = metered
        self._charge(record.key_id, record.input_tokens + record.output_tokens)
        self._reserve(self._writer, metered, _wanted(metered))

    def progress(self, request_id: str, output_tokens: int) -> Awaitable[None] | None:
        """On every engine output, before its tokens go to the client: None when the committed
        record covers them (the usual case, kept cheap), else what to await first."""
        metered = self._open.get(request_id)
        if metered is None or self._writer is None:
            return None
        if output_tokens != metered.output_tokens:
            self._charge(metered.record.key_id, output_tokens - metered.output_tokens)
            metered.output_tokens = output_tokens
        if output_tokens + RENEW_AT > metered.reserved:
            wanted = _wanted(metered)
            if wanted > metered.reserved:  # not yet all of max_tokens
                self._reserve(self._writer, metered, wanted)
        if output_tokens <= metered.covered or self._writer.is_failing:
            return None
        return self.synced()  # the reservation covering them is queued or being written

    def end(self, request_id: str, status: str, input_tokens: int, output_tokens: int) -> None:
        """Queues the final record."""
        metered = self._open.pop(request_id, None)
        if metered is None or self._writer is None:
            return
        begun = metered.record
        self._charge(
            begun.key_id, input_tokens + output_tokens - begun.input_tokens - metered.output_tokens
        )
        final = dataclasses.replace(
            begun,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            status=status,
            updated=time.time(),
        )
        self._writer.put_usage(final)

    async def synced(self) -> None:
        """Until what is queued (records, request-log entries) is committed; not while the store
        fails."""
        if self._writer is not None and not self._writer.is_failing:
            await self._writer.synced()

    def _reserve(self, writer: StoreWriter, metered: _Open, output_tokens: int) -> None:
        metered.reserved = output_tokens
        writer.put_usage(
            dataclasses.replace(metered.record, output_tokens=output_tokens, updated=time.time())
        )

    def _committed(self, records: Sequence[UsageRecord]) -> None:
        for record in records:
            metered = self._open.get(record.request_id)
            if metered is not None and record.status == "running":
                metered.covered = max(metered.covered, record.output_tokens)

    def _charge(self, key_id: str | None, tokens: int) -> None:
        if key_id is not None and key_id in self._spent:
            self._spent[key_id] += tokens


def _wanted(metered: _Open) -> int:
    """The output to reserve now: `RESERVE_TOKENS` beyond what was generated, within max_tokens."""
    wanted = metered.output_tokens + RESERVE_TOKENS
    if metered.max_tokens is not None:
        wanted = max(metered.output_tokens, min(wanted, metered.max_tokens))
    return wanted

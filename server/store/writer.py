"""The store's one writer: metering records and request-log entries, queued on the event loop and
written off it (`asyncio.to_thread`), everything queued in one transaction at a time. Whoever must
not go on before its writes are committed awaits `synced()`. A failed write is logged and retried
every `RETRY_S` with whatever was queued since (the newest version of each row wins); meanwhile
`is_failing` says so, and nobody waits on the store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from server.store.base import RequestEntry, Store, UsageRecord

log = logging.getLogger(__name__)

RETRY_S = 0.5
KEEP_REQUESTS = 100_000  # request-log entries kept in the store: the newest
PRUNE_EVERY = 1_000  # entries written between prunings


class StoreWriter:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.on_usage_committed: Callable[[Sequence[UsageRecord]], None] = lambda records: None
        self.is_failing = False
        self._usage: dict[str, UsageRecord] = {}  # queued, by request id
        self._requests: dict[str, RequestEntry] = {}
        self._batch = 1  # the batch the queue will be written in
        self._attempted = 0  # the newest batch whose write ended, committed or not
        self._committed = 0
        self._wake = asyncio.Event()
        self._flush_ended = asyncio.Event()  # replaced by a fresh one after every write
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unpruned = 0

    def start(self) -> int:
        """Marks what a killed process left `running` as `interrupted` (one server per store),
        prunes the request log, starts writing; how many metering records were interrupted."""
        interrupted = self.store.interrupt_running()
        self.store.prune_requests(KEEP_REQUESTS)
        self._task = asyncio.get_running_loop().create_task(self._write_loop())
        return interrupted

    async def close(self) -> None:
        """Writes what is queued, once more if the last write failed."""
        self._closing.set()
        self._wake.set()
        if self._task is not None:
            await self._task
        if self._is_queued() and not await self._flush():
            log.error(
                "store: %d metering records and %d request-log entries are lost",
                len(self._usage),
                len(self._requests),
            )

    def put_usage(self, record: UsageRecord) -> None:
        self._usage[record.request_id] = record
        self._wake.set()

    def put_request(self, entry: RequestEntry) -> None:
        self._requests[entry.request_id] = entry
        self._wake.set()

    async def synced(self) -> bool:
        """Returns once everything queued so far has been written: True when it was committed,
        False when the write failed (it is retried) or the writer is not running."""
        batch = self._batch if self._is_queued() else self._batch - 1
        while self._attempted < batch:
            if self._task is None or self._task.done():
                return False
            await self._flush_ended.wait()
        return self._committed >= batch

    def _is_queued(self) -> bool:
        return bool(self._usage or self._requests)

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._closing.is_set():
                return
            if self._is_queued() and not await self._flush():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), RETRY_S)
                self._wake.set()

    async def _flush(self) -> bool:
        usage, requests = list(self._usage.values()), list(self._requests.values())
        self._usage, self._requests = {}, {}
        batch, self._batch = self._batch, self._batch + 1
        try:
            await asyncio.to_thread(self._write, usage, requests)
        except Exception:
            if not self.is_failing:
                log.exception("store: writes fail; retrying every %.1f s", RETRY_S)
            self.is_failing = True
            for record in usage:  # newer versions queued meanwhile win
                self._usage.setdefault(record.request_id, record)
            for entry in requests:
                self._requests.setdefault(entry.request_id, entry)
        else:
            if self.is_failing:
                log.warning("store: written again")
            self.is_failing = False
            self._committed = batch
            self.on_usage_committed(usage)
        self._attempted = batch
        ended, self._flush_ended = self._flush_ended, asyncio.Event()
        ended.set()
        return self._committed == batch

    def _write(self, usage: Sequence[UsageRecord], requests: Sequence[RequestEntry]) -> None:
        """In a worker thread, one at a time."""
        self.store.write(usage, requests)
        self._unpruned += len(requests)
        if self._unpruned >= PRUNE_EVERY:
            self._unpruned = 0
            try:
                self.store.prune_requests(KEEP_REQUESTS)
            except Exception:  # the rows are written: pruned after the next thousand
                log.exception("store: the request log was not pruned")

"""The store's one writer: metering records, request-log entries and kept responses, queued on the
event loop and written off it (`asyncio.to_thread`), everything queued in one transaction at a
time. Whoever must not go on before its writes are committed awaits `synced()`. A failed write,
whatever the error, is retried with whatever was queued since (the newest version of each row
wins), after a wait that doubles from `RETRY_S` to `MAX_RETRY_S`; meanwhile `is_failing` says so,
and nobody waits on the store. What waits to be written is bounded: see `is_full`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from server.store.base import RequestEntry, Store, StoredResponse, UsageRecord

log = logging.getLogger(__name__)

RETRY_S = 0.5  # the wait after a first failed write, doubled after each next one
MAX_RETRY_S = 8.0
# Past either bound of what waits to be written, new requests get 503 and no queued row is dropped.
MAX_WAITING_ROWS = 10_000  # metering records, request-log entries and kept responses
MAX_WAITING_BYTES = 64 * 1024 * 1024  # kept responses' JSON
KEEP_REQUESTS = 100_000  # request-log entries kept in the store: the newest
PRUNE_EVERY = 1_000  # entries written between prunings


@dataclass(frozen=True, slots=True)
class WaitingResponse:
    """A kept response's change not yet committed: the response, or None where it was deleted."""

    stored: StoredResponse | None
    size: int  # the response's JSON, in bytes; 0 for a deletion


class StoreWriter:
    def __init__(
        self,
        store: Store,
        max_waiting_rows: int = MAX_WAITING_ROWS,
        max_waiting_bytes: int = MAX_WAITING_BYTES,
    ) -> None:
        self.store = store
        self.on_usage_committed: Callable[[Sequence[UsageRecord]], None] = lambda records: None
        self.is_failing = False
        self._max_rows = max_waiting_rows
        self._max_bytes = max_waiting_bytes
        self._usage: dict[str, UsageRecord] = {}  # queued, by request id
        self._requests: dict[str, RequestEntry] = {}
        self._responses: dict[str, WaitingResponse] = {}  # queued, by response id
        self._writing: dict[str, WaitingResponse] = {}  # the responses of the write under way
        self._waiting_bytes = 0  # of the responses queued and being written
        self._failures = 0  # failed writes in a row
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
                "store: %d metering records, %d request-log entries and %d kept responses are lost",
                len(self._usage),
                len(self._requests),
                len(self._responses),
            )

    @property
    def is_full(self) -> bool:
        """Past either bound of what waits to be written. The node then refuses new requests
        (503) until the store takes writes again, while whatever admitted requests queue is
        still taken: nothing promised to a client is dropped."""
        rows = len(self._usage) + len(self._requests) + len(self._responses) + len(self._writing)
        return rows >= self._max_rows or self._waiting_bytes >= self._max_bytes

    def put_usage(self, record: UsageRecord) -> None:
        self._usage[record.request_id] = record
        self._wake.set()

    def put_request(self, entry: RequestEntry) -> None:
        self._requests[entry.request_id] = entry
        self._wake.set()

    def put_response(self, stored: StoredResponse) -> None:
        self._put_response(stored.response_id, WaitingResponse(stored, len(stored.encode())))

    def delete_response(self, response_id: str) -> None:
        self._put_response(response_id, WaitingResponse(None, 0))

    def waiting_response(self, response_id: str) -> WaitingResponse | None:
        """The response's change that is not yet committed, if any: what a read finds first."""
        waiting = self._responses.get(response_id)
        return waiting if waiting is not None else self._writing.get(response_id)

    async def synced(self) -> bool:
        """Returns once everything queued so far has been written: True when it was committed,
        False when the write failed (it is retried) or the writer is not running."""
        batch = self._batch if self._is_queued() else self._batch - 1
        while self._attempted < batch:
            if self._task is None or self._task.done():
                return False
            await self._flush_ended.wait()
        return self._committed >= batch

    def _put_response(self, response_id: str, waiting: WaitingResponse) -> None:
        replaced = self._responses.get(response_id)
        self._waiting_bytes += waiting.size - (replaced.size if replaced is not None else 0)
        self._responses[response_id] = waiting
        self._wake.set()

    def _is_queued(self) -> bool:
        return bool(self._usage or self._requests or self._responses)

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._closing.is_set():
                return
            if self._is_queued() and not await self._flush():
                wait = min(RETRY_S * 2 ** (self._failures - 1), MAX_RETRY_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), wait)
                self._wake.set()

    async def _flush(self) -> bool:
        usage, requests = list(self._usage.values()), list(self._requests.values())
        self._usage, self._requests = {}, {}
        self._writing, self._responses = self._responses, {}
        kept = [waiting.stored for waiting in self._writing.values() if waiting.stored is not None]
        deleted = [id_ for id_, waiting in self._writing.items() if waiting.stored is None]
        batch, self._batch = self._batch, self._batch + 1
        try:
            await asyncio.to_thread(self._write, usage, requests, kept, deleted)
        except Exception:  # any error at all: the loop goes on, the batch is queued again
            self._failed(usage, requests)
        else:
            self._written(batch, usage)
        self._writing = {}
        self._attempted = batch
        ended, self._flush_ended = self._flush_ended, asyncio.Event()
        ended.set()
        return self._committed == batch

    def _failed(self, usage: Sequence[UsageRecord], requests: Sequence[RequestEntry]) -> None:
        """Queues the batch again; newer versions queued meanwhile win. Called while handling
        the write's exception, which the first failure of a streak logs."""
        self._failures += 1
        if not self.is_failing:
            log.exception(
                "store: writes fail; retrying, every %.0f s at most, with nothing dropped; past "
                "%d rows or %d MiB waiting, new requests are refused (503). Check the store's "
                "disk (space, permissions, the --db file)",
                MAX_RETRY_S,
                self._max_rows,
                self._max_bytes // (1024 * 1024),
            )
        self.is_failing = True
        for record in usage:
            self._usage.setdefault(record.request_id, record)
        for entry in requests:
            self._requests.setdefault(entry.request_id, entry)
        for response_id, waiting in self._writing.items():
            if response_id in self._responses:
                self._waiting_bytes -= waiting.size
            else:
                self._responses[response_id] = waiting

    def _written(self, batch: int, usage: Sequence[UsageRecord]) -> None:
        if self.is_failing:
            log.warning("store: written again, after %d failed writes", self._failures)
        self.is_failing = False
        self._failures = 0
        self._committed = batch
        self._waiting_bytes -= sum(waiting.size for waiting in self._writing.values())
        try:
            self.on_usage_committed(usage)
        except Exception:  # the rows are committed: a failing listener must not stop the writer
            log.exception("store: a listener of committed metering records failed")

    def _write(
        self,
        usage: Sequence[UsageRecord],
        requests: Sequence[RequestEntry],
        responses: Sequence[StoredResponse],
        deleted: Sequence[str],
    ) -> None:
        """In a worker thread, one at a time."""
        self.store.write(usage, requests, responses, deleted)
        self._unpruned += len(requests)
        if self._unpruned >= PRUNE_EVERY:
            self._unpruned = 0
            try:
                self.store.prune_requests(KEEP_REQUESTS)
            except Exception:  # the rows are written: pruned after the next thousand
                log.exception("store: the request log was not pruned")

"""The request log: one record per infer request (status, phases, tokens), kept in memory for the
most recent requests and, with a store, written to it when the request begins and as it ends, so
that `GET /v1/requests/{request_id}` answers after a restart too (see `server.store.writer` for
how many the store keeps)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from server.canonical import Finish
from server.store.base import RequestEntry
from server.store.writer import StoreWriter
from server.timing import Timing

# interrupted: still running when its process was killed (read from the store after a restart)
Status = Literal["running", "succeeded", "failed", "canceled", "interrupted"]
DEFAULT_CAPACITY = 10_000


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    route: str
    model: str
    timing: Timing
    org: str  # only its organization may read it
    created: float = field(default_factory=time.time)
    status: Status = "running"
    stream: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None
    stop_sequence: str | None = None
    error_code: str | None = None
    duration_ms: float | None = None  # from the request head to the response's last byte
    served_by: str = "local"  # local (this node's model), or gateway (the B3IQ gateway route)

    def finished(self, finish: Finish) -> None:
        self.status = "succeeded"
        self.finish_reason = finish.reason.value
        self.stop_sequence = finish.stop_sequence
        self.prompt_tokens = finish.usage.prompt_tokens
        self.completion_tokens = finish.usage.completion_tokens
        self.cached_tokens = finish.usage.cached_tokens

    def failed(self, code: str) -> None:
        self.status = "failed"
        self.error_code = code

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.request_id,
            "object": "infer.request",
            "route": self.route,
            "model": self.model,
            "created": int(self.created),
            "status": self.status,
            "stream": self.stream,
            "served_by": self.served_by,
            "finish_reason": self.finish_reason,
            "stop_sequence": self.stop_sequence,
            "error": None if self.error_code is None else {"code": self.error_code},
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens,
            },
            "timing": {name: round(ms, 3) for name, ms in self.timing.phases.items()},
            "duration_ms": None if self.duration_ms is None else round(self.duration_ms, 3),
        }

    def entry(self) -> RequestEntry:
        return RequestEntry(self.request_id, self.org, self.status, self.created, self.to_wire())


class RequestLog:
    """Bounded: past `capacity` records the oldest are dropped from memory."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, writer: StoreWriter | None = None) -> None:
        self._capacity = capacity
        self._writer = writer
        self._records: OrderedDict[str, RequestRecord] = OrderedDict()

    def add(self, record: RequestRecord) -> RequestRecord:
        """A request begins: its record is queued for the store."""
        self._records[record.request_id] = record
        while len(self._records) > self._capacity:
            self._records.popitem(last=False)
        self.update(record)
        return record

    def update(self, record: RequestRecord) -> None:
        """The record changed (the request was admitted, ended, sent its last byte): queued for
        the store, where a newer version replaces the older."""
        if self._writer is not None:
            self._writer.put_request(record.entry())

    async def entry(self, request_id: str) -> RequestEntry | None:
        """From memory, else from the store."""
        record = self._records.get(request_id)
        if record is not None:
            return record.entry()
        if self._writer is None:
            return None
        return await asyncio.to_thread(self._writer.store.request_entry, request_id)

"""The request log: one record per infer request (status, phases, tokens), kept in memory for the
most recent requests and served at `GET /v1/requests/{request_id}`."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from server.canonical import Finish
from server.timing import Timing

Status = Literal["running", "succeeded", "failed", "canceled"]
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


class RequestLog:
    """Bounded: past `capacity` records the oldest are dropped."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = capacity
        self._records: OrderedDict[str, RequestRecord] = OrderedDict()

    def add(self, record: RequestRecord) -> RequestRecord:
        self._records[record.request_id] = record
        while len(self._records) > self._capacity:
            self._records.popitem(last=False)
        return record

    def get(self, request_id: str) -> RequestRecord | None:
        return self._records.get(request_id)

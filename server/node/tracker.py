"""One admitted request's accounting, from admission to its end however it ends: its hold on
the limits (settled with the real token counts, then released), its metering record and
request-log entry, and its metrics (time to first token, inter-token latency, end to end,
tokens)."""

from __future__ import annotations

import time
from collections.abc import Awaitable

from server.auth.principal import Principal
from server.node.admission import Ticket
from server.node.metering import Meter
from server.node.metrics import Metrics
from server.requestlog import RequestLog, RequestRecord
from server.store.base import UsageRecord


class RequestTracker:
    def __init__(
        self,
        record: RequestRecord,
        principal: Principal,
        ticket: Ticket,
        meter: Meter,
        metrics: Metrics,
        requests: RequestLog,
        max_tokens: int | None,
    ) -> None:
        self._record = record
        self._ticket = ticket
        self._meter = meter
        self._metrics = metrics
        self._requests = requests
        self._last_output: float | None = None
        self._last_tokens = 0
        self._ended = False
        now = time.time()
        meter.begin(
            UsageRecord(
                request_id=record.request_id,
                key_id=principal.key_id,
                org=principal.org,
                project=principal.project,
                model=record.model,
                route=record.route,
                input_tokens=record.prompt_tokens,
                output_tokens=0,
                status="running",
                created=now,
                updated=now,
            ),
            max_tokens,
        )
        requests.update(record)  # admitted: its prompt tokens, written with the metering record
        metrics.in_flight.inc()

    def output(self, completion_tokens: int) -> Awaitable[None] | None:
        """The engine produced output: `completion_tokens` generated so far. None, or what to
        await before the output goes to the client (its metering record must cover it)."""
        now = time.perf_counter()
        new = completion_tokens - self._last_tokens
        if self._last_output is not None and new > 0:
            gap = (now - self._last_output) / new
            itl = self._metrics.itl.labels(self._record.route)
            for _ in range(new):
                itl.observe(gap)
        self._last_output, self._last_tokens = now, completion_tokens
        return self._meter.progress(self._record.request_id, completion_tokens)

    async def settle(self) -> None:
        """The answer finished: ended now, and returns once its metering record and request-log
        entry are committed, so the client never holds a finish the store lacks."""
        self.end()
        await self._meter.synced()

    def end(self) -> None:
        """Idempotent; the record says how the request ended."""
        if self._ended:
            return
        self._ended = True
        record = self._record
        self._ticket.settle(record.prompt_tokens + record.completion_tokens)
        self._ticket.release()
        status = "canceled" if record.status == "running" else record.status
        self._meter.end(record.request_id, status, record.prompt_tokens, record.completion_tokens)
        self._requests.update(record)
        self._metrics.ended(record)
        self._metrics.in_flight.dec()

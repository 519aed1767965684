"""The node's store, as an interface: API keys (kept as SHA-256 hashes), metering records, the
request log and the Responses API's kept responses. The embedded SQLite store
(`server.store.sqlite`) implements it; a server database can replace it. The server and the
`b3os-infer keys` / `usage` commands share one store (`--db`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

SCOPES = ("infer:run", "infer:read")
DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str
    key_hash: str
    org: str
    project: str
    scopes: tuple[str, ...]
    created: float
    expires_at: float | None = None
    spend_cap_tokens: int | None = None  # input and output tokens together, over the key's life
    revoked_at: float | None = None


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One request's metered tokens (`infer.input_tokens`, `infer.output_tokens`)."""

    request_id: str
    key_id: str | None  # None on an open node
    org: str
    project: str
    model: str
    route: str
    input_tokens: int
    output_tokens: int  # while running: reserved, at least what its client has been sent
    status: str  # running until the request ends; interrupted: its process was killed
    created: float
    updated: float


@dataclass(frozen=True, slots=True)
class RequestEntry:
    """One request-log entry: its wire object (`infer.request`) and who may read it."""

    request_id: str
    org: str
    status: str
    created: float
    wire: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A kept response (the Responses API's `store`), with the conversation it answered."""

    response_id: str
    org: str  # only its organization may read it
    created: float  # Unix seconds
    input_items: list[dict[str, Any]]  # everything before the answer (previous turns included)
    response: dict[str, Any]  # the response object, as it was answered

    def encode(self) -> bytes:
        return orjson.dumps({"input_items": self.input_items, "response": self.response})


@dataclass(frozen=True, slots=True)
class Bounds:
    """How much of kept responses is kept: past either bound the oldest go first."""

    max_bytes: int
    max_age_s: float

    @classmethod
    def of(cls, max_mb: float, max_days: float) -> Bounds:
        return cls(int(max_mb * 1024 * 1024), max_days * DAY_S)

    def oldest(self, now: float) -> float:
        """When the oldest response within the age bound was created."""
        return now - self.max_age_s


@dataclass(frozen=True, slots=True)
class UsageTotal:
    org: str
    project: str
    key_id: str | None
    model: str
    requests: int
    input_tokens: int
    output_tokens: int


class Store(Protocol):
    def add_key(self, key: KeyRecord) -> None: ...

    def key_by_hash(self, key_hash: str) -> KeyRecord | None: ...

    def keys(self, org: str | None = None) -> list[KeyRecord]: ...

    def revoke_key(self, key_id: str) -> bool: ...

    def write(
        self,
        usage: Sequence[UsageRecord],
        requests: Sequence[RequestEntry],
        responses: Sequence[StoredResponse] = (),
        deleted: Sequence[str] = (),
    ) -> None:
        """Inserts or replaces each record, entry (by request id) and response (by response id),
        deletes the `deleted` responses and drops the responses past the store's bounds, all in
        one transaction: committed when it returns."""
        ...

    def usage(self, org: str | None = None) -> list[UsageRecord]: ...

    def request_entry(self, request_id: str) -> RequestEntry | None: ...

    def response(self, response_id: str, org: str) -> StoredResponse | None:
        """None for an unknown id, one past the age bound, or one another organization kept."""
        ...

    def prune_requests(self, keep: int) -> int:
        """Drops all but the newest `keep` request-log entries; how many were dropped."""
        ...

    def interrupt_running(self) -> int:
        """Records and request-log entries still `running` (their process was killed) become
        `interrupted`, the records billed to their last written counts; how many records."""
        ...

    def usage_totals(self, org: str | None = None) -> list[UsageTotal]: ...

    def key_spend(self, key_id: str) -> int:
        """Input and output tokens metered for the key so far."""
        ...

    def close(self) -> None: ...
